// ACCELPOOL_UNINSTRUMENTED: for the functions on the path a sanitizer runtime
// takes through the shim while it initialises. Such a runtime resolves its
// interceptors with dlsym (RTLD_NEXT and RTLD_DEFAULT) before its shadow
// memory exists, and the shim's dlsym is the one it reaches; instrumented
// code there would fault. A sanitizer build of the shim leaves every
// function on that path uninstrumented, and these functions call no library
// function that such a runtime intercepts.
#ifndef ACCELPOOL_CUDA_UNINSTRUMENTED_H_
#define ACCELPOOL_CUDA_UNINSTRUMENTED_H_

#define ACCELPOOL_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))

#endif  // ACCELPOOL_CUDA_UNINSTRUMENTED_H_
