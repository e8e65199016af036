// hipDeviceProp_tR0600 exactly as the hip-python 10 extension was compiled
// against it (1472 bytes; offsets probed from hip-python's own accessors and
// pinned by the static_asserts below: a different layout would have it read
// our name and arch from the wrong bytes).
#pragma once
#include <stddef.h>

typedef struct {
  unsigned hasGlobalInt32Atomics : 1, hasGlobalFloatAtomicExch : 1, hasSharedInt32Atomics : 1,
      hasSharedFloatAtomicExch : 1, hasFloatAtomicAdd : 1, hasGlobalInt64Atomics : 1, hasSharedInt64Atomics : 1,
      hasDoubles : 1, hasWarpVote : 1, hasWarpBallot : 1, hasWarpShuffle : 1, hasFunnelShift : 1,
      hasThreadFenceSystem : 1, hasSyncThreadsExt : 1, hasSurfaceFuncs : 1, has3dGrid : 1, hasDynamicParallelism : 1;
} hx_hipDeviceArch_t;

typedef struct {
  char name[256];
  char uuid[16];
  char luid[8];
  unsigned luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
  int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2],
      maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap,
      maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2];
  int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3],
      maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount,
      unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize,
      maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported,
      singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported,
      canUseHostPointerForRegisteredMem, cooperativeLaunch, cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor,
      accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseHipArraySupported, hostRegisterReadOnlySupported,
      timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
  unsigned gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned memoryPoolSupportedHandleTypes;
  int deferredMappingHipArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
  size_t maxSharedMemoryPerMultiProcessor;
  int clockInstructionRate;
  hx_hipDeviceArch_t arch;
  unsigned* hdpMemFlushCntl;
  unsigned* hdpRegFlushCntl;
  int cooperativeMultiDeviceUnmatchedFunc, cooperativeMultiDeviceUnmatchedGridDim,
      cooperativeMultiDeviceUnmatchedBlockDim, cooperativeMultiDeviceUnmatchedSharedMem;
  int isLargeBar, asicRevision;
} hx_hipDeviceProp_t;

#define HX_AT_(f, off) _Static_assert(offsetof(hx_hipDeviceProp_t, f) == off, #f);
HX_AT_(totalGlobalMem, 288)
HX_AT_(warpSize, 308)
HX_AT_(maxThreadsPerBlock, 320)
HX_AT_(maxThreadsDim, 324)
HX_AT_(maxGridSize, 336)
HX_AT_(major, 360)
HX_AT_(multiProcessorCount, 388)
HX_AT_(l2CacheSize, 616)
HX_AT_(sharedMemPerMultiprocessor, 640)
HX_AT_(sharedMemPerBlockOptin, 696)
HX_AT_(memoryPoolsSupported, 744)
HX_AT_(unifiedFunctionPointers, 776)
HX_AT_(gcnArchName, 1160)
HX_AT_(maxSharedMemoryPerMultiProcessor, 1416)
HX_AT_(cooperativeMultiDeviceUnmatchedSharedMem, 1460)
HX_AT_(asicRevision, 1468)
_Static_assert(sizeof(hx_hipDeviceProp_t) == 1472, "sizeof hipDeviceProp_tR0600");
#undef HX_AT_
