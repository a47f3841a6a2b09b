// Hygon DCUs through ROCm SMI. hy-smi/rocm-smi print "K100_AI"; the profile
// spells it "K100-AI". No topology rule is documented (all pairs PXB in the
// published K100-AI sample): profile hygon-k100-x8.
#include <algorithm>

#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec HygonSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kHygon;
  s.id_prefix = "DCU";
  s.model = [](std::string name) {
    std::replace(name.begin(), name.end(), '_', '-');
    return name;
  };
  s.profiles = {{"K100", 8, "hygon-k100-x8"}};
  // Each DCU names its render node (ROCm SMI, else sysfs); one that does
  // not has none to guess (rocm_smi_library.cc).
  s.nodes_from_sysfs_only = true;
  return s;
}

}  // namespace accelpool::vendors
