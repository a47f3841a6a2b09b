// Output of the trace replay: a text table, JSON, and CSV files (summary and
// curves) that scripts/quality.sh turns into plots.
//
// Thread-safety: pure functions except the file writers, which write only
// under the directory they are given.
#ifndef ACCELPOOL_SIM_OUTPUT_H_
#define ACCELPOOL_SIM_OUTPUT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/experiment.h"

namespace accelpool::sim {

nlohmann::json SummariesJson(const std::vector<Summary>& s);
std::string SummaryTable(const std::vector<Summary>& s);

// Figures at 100 % arrived that were not measured (the arrivals stopped short
// of it) are null in JSON, empty in CSV and "-" in the table, which then says
// why in a line below it.
//
// first_failure_arrived_pct is unset (null, empty, "-" or "k/n seeds" in the
// table) unless every seed failed; seeds_failed says how many did.
// cpu_pods is who placed the pods that ask for no GPU in the row's mode;
// idle_node_penalty is null in JSON and empty in CSV outside kube mode.
//
// Writes <dir>/summary.csv and <dir>/curve-<trace>-<mode>.csv (one column
// group per policy). Creates dir.
Status WriteOutputs(const std::vector<Summary>& s, const std::string& dir);

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_OUTPUT_H_
