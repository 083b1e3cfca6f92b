// kiln's INT8 implicit-GEMM convolution (int8_conv.cuh) with the general epilogue (a float output,
// a float bias, a residual, or an int32 bias too large to start the sums at), on mma.sync: 128
// filters per block (warps 2 × 4), and 64 for narrow layers (warps 4 × 2). A source of its own,
// compiled beside int8_conv.cu: these two kernels took about half of its NVRTC time.
#include "int8_conv.cuh"

INT8_CONV(int8_conv_bn128, 128, 2, 4, false, false)
INT8_CONV(int8_conv_bn64, 64, 4, 2, false, false)
