// Kunlunxin XPUs. xpu-smi names the P800 OAM module "P800" (optionally with a
// form-factor suffix); 8 P800 form two wings {0-3} {4-7} (profile
// kunlunxin-p800-x8).
#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec KunlunxinSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kKunlunxin;
  s.id_prefix = "XPU";
  s.model = [](const std::string& name) { return name.substr(0, name.find(' ')); };
  s.profiles = {{"P800", 8, "kunlunxin-p800-x8"}};
  return s;
}

}  // namespace accelpool::vendors
