// T-Head PPUs through HGML (NVML-shaped). ppu-smi names the 810E
// "PPU-ZW810E"; up to 16 PPUs are all joined by ICN, NUMA preferred (profile
// thead-ppu-x16).
#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec TheadSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kThead;
  s.id_prefix = "PPU";
  s.profiles = {{"PPU", 16, "thead-ppu-x16"}};
  return s;
}

}  // namespace accelpool::vendors
