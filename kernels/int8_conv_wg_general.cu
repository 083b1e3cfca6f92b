// kiln's INT8 implicit-GEMM convolution (int8_conv.cuh) with the general epilogue on Hopper's
// wgmma main loop (sm_90a images only), each warpgroup 64 pixels × BN. A source of its own,
// compiled beside int8_conv.cu: these two kernels took about half of its NVRTC time.
#include "int8_conv.cuh"

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
INT8_CONV(int8_conv_wg_bn128, 128, 8, 1, false, true)
INT8_CONV(int8_conv_wg_bn64, 64, 8, 1, false, true)
#endif
