// The LibraryDriverSpec of each vendor served through a DeviceLibrary: how
// its product names become models and which topology profile a node of that
// model and size gets (VENDORS.md section 11). One definition per vendor
// folder.
//
// Thread-safety: pure functions returning values.
#ifndef ACCELPOOL_VENDORS_LIBRARY_SPECS_H_
#define ACCELPOOL_VENDORS_LIBRARY_SPECS_H_

#include "vendors/library_driver.h"

namespace accelpool::vendors {

LibraryDriverSpec KunlunxinSpec();  // kunlunxin/kunlunxin_spec.cc
LibraryDriverSpec MetaxSpec();      // metax/metax_spec.cc
LibraryDriverSpec MthreadsSpec();   // mthreads/mthreads_spec.cc
LibraryDriverSpec CambriconSpec();  // cambricon/cambricon_spec.cc
LibraryDriverSpec HygonSpec();      // hygon/hygon_spec.cc
LibraryDriverSpec TheadSpec();      // thead/thead_spec.cc

}  // namespace accelpool::vendors

#endif  // ACCELPOOL_VENDORS_LIBRARY_SPECS_H_
