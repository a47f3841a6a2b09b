// Moore Threads GPUs through MTML. mthreads-gmi names them "MTT S4000"; no
// allocation rule is documented, so 8 S4000 get NUMA-half preference
// (profile mthreads-s4000-x8) and MtLink adjacency where MTML reports it.
#include "vendors/library_specs.h"

namespace accelpool::vendors {

LibraryDriverSpec MthreadsSpec() {
  LibraryDriverSpec s;
  s.vendor = core::Vendor::kMthreads;
  s.id_prefix = "MT";
  s.profiles = {{"MTT S4000", 8, "mthreads-s4000-x8"}};
  return s;
}

}  // namespace accelpool::vendors
