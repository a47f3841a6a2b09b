// MetaX GPUs through MX-SML. mx-smi names them "MetaX C500"; 8 C500 form two
// MetaXLink zones {0-3} {4-7} (profile metax-c500-x8).
#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec MetaxSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kMetax;
  s.id_prefix = "MX";
  s.model = [](const std::string& name) {
    const std::string prefix = "MetaX ";
    return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
  };
  s.profiles = {{"C500", 8, "metax-c500-x8"}};
  s.nodes_from_sysfs_only = true;  // /dev/dri/card<N> is numbered over every DRM device
  return s;
}

}  // namespace accelpool::vendors
