// The few CUDA driver API and NVML declarations libaccelpool-cuda needs.
//
// No CUDA headers are required to build the shim or its tests: the types,
// enum values and prototypes below are written from the public driver API
// documentation (CUDA 12 and 13) and are ABI-compatible with libcuda.so.1 and
// libnvidia-ml.so.1 on 64-bit Linux. Only what the shim hooks, calls or the
// fake driver implements is declared. Function types are declared as
// `...Fn` pointer typedefs so that nothing here binds a symbol at link time.
//
// Thread-safety: declarations only.
#ifndef ACCELPOOL_CUDA_CUDA_TYPES_H_
#define ACCELPOOL_CUDA_CUDA_TYPES_H_

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // NOLINT: the driver's own spelling.
typedef unsigned long long cuuint64_t;   // NOLINT
typedef unsigned long long CUmemGenericAllocationHandle;  // NOLINT

typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUarray_st* CUarray;
typedef struct CUmipmappedArray_st* CUmipmappedArray;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUmemPoolHandle_st* CUmemoryPool;

// CUresult values used by the shim and the fake driver.
enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
};

// CUstreamCaptureMode: which calls a thread may make while a capture is
// under way (cuThreadExchangeStreamCaptureMode).
enum : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// cuGetProcAddress flags and query results.
enum : unsigned long long {  // NOLINT
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1,
};
typedef enum CUdriverProcAddressQueryResult_enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

// Special stream handles.
#define ACCELPOOL_CU_STREAM_LEGACY (reinterpret_cast<CUstream>(0x1))
#define ACCELPOOL_CU_STREAM_PER_THREAD (reinterpret_cast<CUstream>(0x2))

enum : unsigned int { CU_EVENT_DEFAULT = 0 };

// Array formats (CUarray_format) with a known element size.
enum : int {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  int Format;  // CUarray_format
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;  // CUarray_format
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
// CUDA_ARRAY3D_DESCRIPTOR::Flags. With LAYERED or CUBEMAP, Depth counts
// layers (or faces), which mipmap levels do not shrink. SPARSE and
// DEFERRED_MAPPING: arrays whose memory is mapped into them later
// (cuMemMapArrayAsync) from cuMemCreate handles.
enum : unsigned int {
  CUDA_ARRAY3D_LAYERED = 0x01,
  CUDA_ARRAY3D_CUBEMAP = 0x04,
  CUDA_ARRAY3D_SPARSE = 0x40,
  CUDA_ARRAY3D_DEFERRED_MAPPING = 0x80,
};

// Virtual memory management.
enum : int {  // CUmemLocationType; newer drivers add further (device) types.
  CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
  CU_MEM_LOCATION_TYPE_HOST = 0x2,
  CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
};
typedef struct CUmemLocation_st {
  int type;  // CUmemLocationType
  int id;
} CUmemLocation;
typedef struct CUmemAllocationProp_st {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;  // NOLINT
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

// cuMemMapArrayAsync: maps cuMemCreate handles into (or unmaps them from)
// sparse and deferred-mapping arrays. Layout as in cuda.h (CUDA 11.1 on);
// the shim reads only the operation, the handle type and the handle.
enum : int {  // CUmemOperationType
  CU_MEM_OPERATION_TYPE_MAP = 1,
  CU_MEM_OPERATION_TYPE_UNMAP = 2,
};
enum : int { CU_MEM_HANDLE_TYPE_GENERIC = 0 };  // CUmemHandleType
typedef struct CUarrayMapInfo_st {
  int resourceType;  // CUresourcetype
  union {
    CUmipmappedArray mipmap;
    CUarray array;
  } resource;
  int subresourceType;  // CUarraySparseSubresourceType
  union {
    struct {
      unsigned int level;
      unsigned int layer;
      unsigned int offsetX;
      unsigned int offsetY;
      unsigned int offsetZ;
      unsigned int extentWidth;
      unsigned int extentHeight;
      unsigned int extentDepth;
    } sparseLevel;
    struct {
      unsigned int layer;
      unsigned long long offset;  // NOLINT
      unsigned long long size;    // NOLINT
    } miptail;
  } subresource;
  int memOperationType;  // CUmemOperationType
  int memHandleType;     // CUmemHandleType
  union {
    CUmemGenericAllocationHandle memHandle;  // NULL for an unmap.
  } memHandle;
  unsigned long long offset;  // NOLINT
  unsigned int deviceBitMask;
  unsigned int flags;
  unsigned int reserved[2];
} CUarrayMapInfo;
static_assert(offsetof(CUarrayMapInfo, memOperationType) == 56, "CUarrayMapInfo ABI");
static_assert(offsetof(CUarrayMapInfo, memHandle) == 64, "CUarrayMapInfo ABI");
static_assert(sizeof(CUarrayMapInfo) == 96, "CUarrayMapInfo ABI");

typedef struct CUipcMemHandle_st {
  char reserved[64];
} CUipcMemHandle;

// cuPointerGetAttribute: the ordinal of the device an allocation lives on (int).
enum : int { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };

// Stream-ordered memory pools (CUmemPool_attribute values; attribute values
// of the *_MEM_* and threshold kinds are cuuint64_t).
enum : int {
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
  // Where the pool's memory lives (int each). Newer than CUDA 13.0's cuda.h,
  // which ends the enum at USED_MEM_HIGH (8): drivers that predate them refuse
  // the query (accounting.cc then uses what cuMemPoolCreate was given).
  CU_MEMPOOL_ATTR_LOCATION_ID = 11,
  CU_MEMPOOL_ATTR_LOCATION_TYPE = 12,
};
typedef struct CUmemPoolProps_st {
  int allocType;    // CUmemAllocationType
  int handleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;  // NOLINT
  unsigned char reserved[54];
} CUmemPoolProps;

// Graph memory nodes (CUDA 11.4+). A graph's allocations come from a
// per-device graph pool whose physical memory is mapped when an executable
// graph is uploaded or first launched, not when it is built.
enum : int {
  CU_GRAPH_NODE_TYPE_GRAPH = 4,  // Child graph.
  CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
};
enum : int {  // CUgraphMem_attribute; values are cuuint64_t.
  CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
  CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
};
enum : unsigned long long {  // NOLINT: CUgraphInstantiate_flags.
  CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD = 2,
};
typedef struct CUmemAccessDesc_st CUmemAccessDesc;
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {
  CUmemPoolProps poolProps;
  const CUmemAccessDesc* accessDescs;
  size_t accessDescCount;
  size_t bytesize;
  CUdeviceptr dptr;  // Out: the allocation's fixed address.
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st {
  cuuint64_t flags;
  CUstream hUploadStream;
  CUgraphNode hErrNode_out;
  int result_out;  // CUgraphInstantiateResult
} CUDA_GRAPH_INSTANTIATE_PARAMS;
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps ABI");
static_assert(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize) == 104, "mem alloc node ABI");
static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120, "mem alloc node ABI");

// cuLaunchKernelEx configuration. Attributes are passed through untouched.
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

// Driver entry points, as function-pointer types.
typedef CUresult (*cuGetProcAddressFn)(const char*, void**, int, cuuint64_t);
typedef CUresult (*cuGetProcAddress_v2Fn)(const char*, void**, int, cuuint64_t,
                                          CUdriverProcAddressQueryResult*);
typedef CUresult (*cuMemAllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*cuMemAllocPitchFn)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
typedef CUresult (*cuMemAllocManagedFn)(CUdeviceptr*, size_t, unsigned int);
typedef CUresult (*cuMemFreeFn)(CUdeviceptr);
typedef CUresult (*cuArrayCreateFn)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
typedef CUresult (*cuArray3DCreateFn)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
typedef CUresult (*cuArrayDestroyFn)(CUarray);
typedef CUresult (*cuMipmappedArrayCreateFn)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*,
                                             unsigned int);
typedef CUresult (*cuMipmappedArrayDestroyFn)(CUmipmappedArray);
typedef CUresult (*cuMemAllocAsyncFn)(CUdeviceptr*, size_t, CUstream);
typedef CUresult (*cuMemAllocFromPoolAsyncFn)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
typedef CUresult (*cuMemFreeAsyncFn)(CUdeviceptr, CUstream);
typedef CUresult (*cuMemCreateFn)(CUmemGenericAllocationHandle*, size_t,
                                  const CUmemAllocationProp*, unsigned long long);  // NOLINT
typedef CUresult (*cuMemReleaseFn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuMemMapFn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long);  // NOLINT
typedef CUresult (*cuMemUnmapFn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemRetainAllocationHandleFn)(CUmemGenericAllocationHandle*, void*);
typedef CUresult (*cuMemMapArrayAsyncFn)(CUarrayMapInfo*, unsigned int, CUstream);
typedef CUresult (*cuIpcOpenMemHandleFn)(CUdeviceptr*, CUipcMemHandle, unsigned int);
typedef CUresult (*cuIpcCloseMemHandleFn)(CUdeviceptr);
typedef CUresult (*cuIpcGetMemHandleFn)(CUipcMemHandle*, CUdeviceptr);
typedef CUresult (*cuMemGetInfoFn)(size_t*, size_t*);
typedef CUresult (*cuDeviceTotalMemFn)(size_t*, CUdevice);
typedef CUresult (*cuMemGetAddressRangeFn)(CUdeviceptr*, size_t*, CUdeviceptr);
typedef CUresult (*cuPointerGetAttributeFn)(void*, int, CUdeviceptr);
typedef CUresult (*cuDeviceGetMemPoolFn)(CUmemoryPool*, CUdevice);
// A device's UUID: 16 bytes (cuDeviceGetUuid[_v2]); a MIG instance's own UUID.
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;
typedef CUresult (*cuDeviceGetUuidFn)(CUuuid*, CUdevice);
typedef CUresult (*cuMemPoolGetAttributeFn)(CUmemoryPool, int, void*);
typedef CUresult (*cuMemPoolTrimToFn)(CUmemoryPool, size_t);
typedef CUresult (*cuMemPoolDestroyFn)(CUmemoryPool);
typedef CUresult (*cuMemPoolCreateFn)(CUmemoryPool*, const CUmemPoolProps*);
typedef CUresult (*cuLaunchKernelFn)(CUfunction, unsigned int, unsigned int, unsigned int,
                                     unsigned int, unsigned int, unsigned int, unsigned int,
                                     CUstream, void**, void**);
typedef CUresult (*cuLaunchKernelExFn)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*cuLaunchCooperativeKernelFn)(CUfunction, unsigned int, unsigned int,
                                                unsigned int, unsigned int, unsigned int,
                                                unsigned int, unsigned int, CUstream, void**);
typedef CUresult (*cuGraphLaunchFn)(CUgraphExec, CUstream);
// Deprecated launches of a function whose block shape and parameters were
// set beforehand (cuFuncSetBlockShape, cuParamSet*): cuLaunch runs one
// block; cuLaunchGrid and cuLaunchGridAsync a grid_width x grid_height grid.
typedef CUresult (*cuLaunchFn)(CUfunction);
typedef CUresult (*cuLaunchGridFn)(CUfunction, int, int);
typedef CUresult (*cuLaunchGridAsyncFn)(CUfunction, int, int, CUstream);
typedef CUresult (*cuGraphUploadFn)(CUgraphExec, CUstream);
typedef CUresult (*cuGraphInstantiateWithFlagsFn)(CUgraphExec*, CUgraph,
                                                  unsigned long long);  // NOLINT
typedef CUresult (*cuGraphInstantiateWithParamsFn)(CUgraphExec*, CUgraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS*);
// cuGraphInstantiate_v2, the CUDA 11 ABI (error node and log buffer).
typedef CUresult (*cuGraphInstantiateV2Fn)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
typedef CUresult (*cuGraphExecDestroyFn)(CUgraphExec);
typedef CUresult (*cuDeviceGraphMemTrimFn)(CUdevice);
typedef CUresult (*cuDeviceGetGraphMemAttributeFn)(CUdevice, int, void*);
typedef CUresult (*cuGraphGetNodesFn)(CUgraph, CUgraphNode*, size_t*);
typedef CUresult (*cuGraphNodeGetTypeFn)(CUgraphNode, int*);
typedef CUresult (*cuGraphMemAllocNodeGetParamsFn)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*);
typedef CUresult (*cuGraphChildGraphNodeGetGraphFn)(CUgraphNode, CUgraph*);
typedef CUresult (*cuCtxGetDeviceFn)(CUdevice*);
typedef CUresult (*cuDevicePrimaryCtxResetFn)(CUdevice);
typedef CUresult (*cuDevicePrimaryCtxRetainFn)(CUcontext*, CUdevice);
typedef CUresult (*cuDevicePrimaryCtxReleaseFn)(CUdevice);
typedef CUresult (*cuDevicePrimaryCtxGetStateFn)(CUdevice, unsigned int*, int*);
typedef CUresult (*cuCtxDestroyFn)(CUcontext);
// cuCtxCreate's three ABIs (cudaTypedefs.h: PFN_cuCtxCreate_v3020, _v11040,
// _v12050); the shim passes their parameter blocks through unread.
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef CUresult (*cuCtxCreateFn)(CUcontext*, unsigned int, CUdevice);
typedef CUresult (*cuCtxCreateV3Fn)(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);
typedef CUresult (*cuCtxCreateV4Fn)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
typedef CUresult (*cuCtxGetCurrentFn)(CUcontext*);
// CUlimit values of cuCtxSetLimit / cuCtxGetLimit (cudaDeviceSetLimit).
enum : int {
  CU_LIMIT_STACK_SIZE = 0x00,
  CU_LIMIT_MALLOC_HEAP_SIZE = 0x02,
};
typedef CUresult (*cuCtxSetLimitFn)(int, size_t);  // (CUlimit, value)
typedef CUresult (*cuCtxGetLimitFn)(size_t*, int);
typedef CUresult (*cuCtxPushCurrentFn)(CUcontext);
typedef CUresult (*cuCtxPopCurrentFn)(CUcontext*);
typedef CUresult (*cuStreamGetCtxFn)(CUstream, CUcontext*);
typedef CUresult (*cuStreamGetDeviceFn)(CUstream, CUdevice*);  // CUDA 12.8 on.
typedef CUresult (*cuEventCreateFn)(CUevent*, unsigned int);
typedef CUresult (*cuEventDestroyFn)(CUevent);
typedef CUresult (*cuEventRecordFn)(CUevent, CUstream);
typedef CUresult (*cuEventQueryFn)(CUevent);
typedef CUresult (*cuEventElapsedTimeFn)(float*, CUevent, CUevent);
typedef CUresult (*cuThreadExchangeStreamCaptureModeFn)(int*);  // CUstreamCaptureMode*

// NVML: only the memory query and the index and UUID lookups.
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t;
enum : int { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2 };
typedef struct nvmlMemory_st {
  unsigned long long total;  // NOLINT
  unsigned long long free;   // NOLINT
  unsigned long long used;   // NOLINT
} nvmlMemory_t;
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;     // NOLINT
  unsigned long long reserved;  // NOLINT
  unsigned long long free;      // NOLINT
  unsigned long long used;      // NOLINT
} nvmlMemory_v2_t;
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfoFn)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2Fn)(nvmlDevice_t, nvmlMemory_v2_t*);
typedef nvmlReturn_t (*nvmlDeviceGetIndexFn)(nvmlDevice_t, unsigned int*);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" ("MIG-..." for a MIG instance).
typedef nvmlReturn_t (*nvmlDeviceGetUUIDFn)(nvmlDevice_t, char*, unsigned int);

}  // extern "C"

#endif  // ACCELPOOL_CUDA_CUDA_TYPES_H_
