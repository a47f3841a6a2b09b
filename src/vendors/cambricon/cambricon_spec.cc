// Cambricon MLUs through CNDev. cnmon names the dual-chip board "MLU370-X8";
// 8 chips are 4 boards whose two chips belong together (profile
// cambricon-mlu370-x8).
#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec CambriconSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kCambricon;
  s.id_prefix = "MLU";
  s.profiles = {{"MLU370-X8", 8, "cambricon-mlu370-x8"}};
  return s;
}

}  // namespace accelpool::vendors
