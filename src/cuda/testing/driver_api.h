// Prototypes of the driver entry points the fake libcuda.so.1 exports, for
// the fake's own cuGetProcAddress table and for the probe's direct calls.
// Test-only: production code never declares driver symbols (it resolves
// them at run time; see cuda_types.h).
//
// Thread-safety: declarations only.
#ifndef ACCELPOOL_CUDA_TESTING_DRIVER_API_H_
#define ACCELPOOL_CUDA_TESTING_DRIVER_API_H_

#include <cstddef>
#include <cstdint>

#include "cuda/cuda_types.h"

// Kernel lengths (the int64_t that params[0] of a fake launch points at)
// with a meaning of their own. A gate kernel never finishes until a release
// kernel is launched (on any stream): it stands for a kernel that waits on
// work launched after it (a spin-wait released by a later kernel, one side
// of a collective, cuStreamWaitValue32). Work queued behind a gate on its
// stream runs once it is released; the release kernel itself runs nothing.
inline constexpr int64_t kFakeGateKernelNs = -1;
inline constexpr int64_t kFakeReleaseKernelNs = -2;

// The UUIDs of the fake's two physical devices, as both fakes report them:
// cuDeviceGetUuid gives kFakeUuidPrefix and the device's number as the 16th
// byte, nvmlDeviceGetUUID the text; CUDA_VISIBLE_DEVICES may name them.
inline constexpr unsigned char kFakeUuidPrefix[15] = {
    0xfa, 0x4e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
inline constexpr const char* kFakeDeviceUuids[2] = {"GPU-fa4e0000-0000-4000-8000-000000000000",
                                                    "GPU-fa4e0000-0000-4000-8000-000000000001"};

extern "C" {

CUresult cuInit(unsigned);
CUresult cuDriverGetVersion(int*);
CUresult cuDeviceGetCount(int*);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDeviceTotalMem_v2(size_t*, CUdevice);
CUresult cuDeviceGetUuid(CUuuid*, CUdevice);
CUresult cuDeviceGetUuid_v2(CUuuid*, CUdevice);
CUresult cuCtxGetDevice(CUdevice*);
CUresult cuCtxGetCurrent(CUcontext*);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize();
CUresult cuCtxCreate_v2(CUcontext*, unsigned, CUdevice);
CUresult cuCtxCreate_v3(CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice);
CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
CUresult cuCtxDestroy(CUcontext);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuDevicePrimaryCtxReset(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuDevicePrimaryCtxRelease(CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned*, int*);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuMemAlloc(unsigned*, unsigned);  // The CUDA 3.1-era ABI.
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool*, CUdevice);
CUresult cuDeviceGetMemPool(CUmemoryPool*, CUdevice);
CUresult cuDeviceSetMemPool(CUdevice, CUmemoryPool);
CUresult cuMemPoolCreate(CUmemoryPool*, const CUmemPoolProps*);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuMemPoolGetAttribute(CUmemoryPool, int, void*);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void*);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
CUresult cuArrayCreate_v2(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
CUresult cuArray3DCreate_v2(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
CUresult cuArrayDestroy(CUarray);
CUresult cuIpcGetMemHandle(CUipcMemHandle*, CUdeviceptr);
CUresult cuMipmappedArrayCreate(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long);  // NOLINT
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);  // NOLINT
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle*, void*);
CUresult cuMemMapArrayAsync(CUarrayMapInfo*, unsigned, CUstream);
CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo*, unsigned, CUstream);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr*, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuMemGetAddressRange_v2(CUdeviceptr*, size_t*, CUdeviceptr);
CUresult cuPointerGetAttribute(void*, int, CUdeviceptr);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**);
CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void**);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, CUstream, void**);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuLaunch(CUfunction);
CUresult cuLaunchGrid(CUfunction, int, int);
CUresult cuLaunchGridAsync(CUfunction, int, int, CUstream);
CUresult cuGraphCreate(CUgraph*, unsigned);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                CUDA_MEM_ALLOC_NODE_PARAMS*);
CUresult cuGraphAddMemFreeNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr);
CUresult cuGraphAddChildGraphNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraph);
CUresult cuGraphAddEmptyNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t);
CUresult cuGraphGetNodes(CUgraph, CUgraphNode*, size_t*);
CUresult cuGraphNodeGetType(CUgraphNode, int*);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode, CUgraph*);
CUresult cuGraphInstantiate_v2(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
CUresult cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);  // NOLINT
CUresult cuGraphInstantiateWithParams(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec*, CUgraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS*);
CUresult cuGraphUpload(CUgraphExec, CUstream);
CUresult cuGraphUpload_ptsz(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuDeviceGraphMemTrim(CUdevice);
CUresult cuDeviceGetGraphMemAttribute(CUdevice, int, void*);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph*);
CUresult cuStreamIsCapturing(CUstream, int*);
CUresult cuStreamIsCapturing_ptsz(CUstream, int*);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamCreate(CUstream*, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamGetCtx(CUstream, CUcontext*);
CUresult cuStreamGetDevice(CUstream, CUdevice*);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxSetLimit(int, size_t);  // (CUlimit, value)
CUresult cuCtxGetLimit(size_t*, int);
CUresult cuCtxPopCurrent_v2(CUcontext*);
CUresult cuEventCreate(CUevent*, unsigned);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuThreadExchangeStreamCaptureMode(int*);
CUresult cuEventElapsedTime(float*, CUevent, CUevent);
CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t,
                             CUdriverProcAddressQueryResult*);
CUresult cuGetProcAddress_v2_ptsz(const char*, void**, int, cuuint64_t,
                                  CUdriverProcAddressQueryResult*);

// Test-only entry points of the fake.
uint64_t fakecuda_DeviceUsedBytes(int device);
void fakecuda_Fail(const char* name, int fail);
void fakecuda_OnNextFree(void (*fn)(void*), void* ctx);
void fakecuda_OnNextCtxDestroy(void (*fn)(void*), void* ctx);
void fakecuda_OnNextAddressRange(void (*fn)(void*), void* ctx);
void fakecuda_OnNextUnmap(void (*fn)(void*), void* ctx);
void fakecuda_NextCtxHandle(uintptr_t handle);
void fakecuda_GreenCurrent(uintptr_t green);
void fakecuda_IpcRefcounted(int on);
void fakecuda_DeferAsyncFrees(int on);
int64_t fakecuda_BusyNs();
int64_t fakecuda_EventRecords();
int64_t fakecuda_UnknownEventCalls();
int64_t fakecuda_ForeignEventRecords();
int64_t fakecuda_ForeignNs();
void fakecuda_SetForeign(double fraction, double factor);
void* fakecuda_Lookup(const char* exported);
uint64_t fakecuda_GraphReservedBytes(int device);
void fakecuda_OnNextGraphMap(int after_map, void (*fn)(void*), void* ctx);
void fakecuda_OnNextGraphMemAttribute(void (*fn)(void*), void* ctx);

}  // extern "C"

#endif  // ACCELPOOL_CUDA_TESTING_DRIVER_API_H_
