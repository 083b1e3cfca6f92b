// kiln's INT8 implicit-GEMM convolution (int8_conv.cuh): the kernels with the levels-only
// epilogue, and the channel padding and column folding that feed every int8 convolution. The
// general epilogue's kernels are int8_conv_general.cu's and int8_conv_wg_general.cu's.
#include "int8_conv.cuh"

// 128 filters per block (warps 2 × 4, each 64 pixels × 32 filters), and 64 for narrow layers
// (warps 4 × 2, each 32 × 32); `_levels`: the LEVELS epilogue. The launch bounds keep two blocks
// of 128 filters resident per multiprocessor and three of 64 (ptxas spills nothing for them).
INT8_CONV(int8_conv_bn128_levels, 128, 2, 4, true, false)
INT8_CONV(int8_conv_bn64_levels, 64, 4, 2, true, false)

// The wgmma main loop (`wg`), where the architecture has it: each warpgroup 64 pixels × BN.
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
INT8_CONV(int8_conv_wg_bn128_levels, 128, 8, 1, true, true)
INT8_CONV(int8_conv_wg_bn64_levels, 64, 8, 1, true, true)
#endif

// An 8-bit [n, c, h, w] tensor (element strides sn, sc, sh, sw: any layout) as packed NHWC with
// its channels zero-padded to `padded`, a multiple of 16: one 16-byte piece per thread. How an
// RGB stem, or any channel count short of 16s, reaches the convolution above.
template <typename I>
__device__ __forceinline__ void pad_channels(I n, I c, I h, I w, I padded, i64 sn, i64 sc, i64 sh, i64 sw, const unsigned char* x, unsigned char* y) {
    const I per_pixel = padded / 16, total = n * h * w * per_pixel;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I pixel = i / per_pixel;
        const I first = (i % per_pixel) * 16, iw = pixel % w;
        pixel /= w;
        const I ih = pixel % h, in = pixel / h;
        const unsigned char* src = x + in * sn + ih * sh + iw * sw;
        uint4 piece;
        unsigned char* bytes = reinterpret_cast<unsigned char*>(&piece);
#pragma unroll
        for (int j = 0; j < 16; ++j) bytes[j] = first + j < c ? src[(first + j) * sc] : 0;
        reinterpret_cast<uint4*>(y)[i] = piece;
    }
}

// Index arithmetic in 32 bits where the pieces fit (64-bit divisions were most of these
// kernels' time), in 64 otherwise.
#define KILN_FITS_32(total) ((total) < (1ll << 31))

extern "C" __global__ void int8_pad_channels(i64 n, i64 c, i64 h, i64 w, i64 padded, i64 sn, i64 sc, i64 sh, i64 sw,
                                             const unsigned char* x, unsigned char* y) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    if (KILN_FITS_32(n * h * w * (padded / 16)))
        pad_channels<unsigned>((unsigned)n, (unsigned)c, (unsigned)h, (unsigned)w, (unsigned)padded, sn, sc, sh, sw, x, y);
    else
        pad_channels<i64>(n, c, h, w, padded, sn, sc, sh, sw, x, y);
}

// Width taps folded into channels, for inputs of at most 8 channels (an RGB stem): `group`
// neighbouring columns of `padded` (4 or 8) zero-padded channels make one 16-byte pixel of y
// ([n][h][out_w][16]): y[.., f, j·padded + cc] = x[.., cc, .., f·step + j − shift], zeros outside
// x. For the input (step 1, shift = the left padding) a filter of width kw then reads
// ceil(kw / group) folded columns, `group` apart (the convolution's dilation); for the filter
// itself (step = group, no shift) its taps fold the same way. A 7×7 filter over 3 channels sums
// 7·2·16 products per pixel instead of the 7·7·16 of channels padded to 16.
template <int PADDED, typename I>
__device__ __forceinline__ void fold_columns(I n, i64 c, I h, i64 w, I out_w, i64 step, i64 shift, i64 sn, i64 sc, i64 sh, i64 sw,
                                             const unsigned char* x, unsigned char* y) {
    const I total = n * h * out_w;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I f = i % out_w, row = i / out_w, ih = row % h, in = row / h;
        const unsigned char* src = x + in * sn + ih * sh;
        uint4 piece;
        unsigned char* bytes = reinterpret_cast<unsigned char*>(&piece);
#pragma unroll
        for (int b = 0; b < 16; ++b) {
            const int cc = b % PADDED;
            const i64 col = (i64)f * step + b / PADDED - shift;
            bytes[b] = cc < c && col >= 0 && col < w ? src[cc * sc + col * sw] : 0;
        }
        reinterpret_cast<uint4*>(y)[i] = piece;
    }
}

extern "C" __global__ void int8_fold_columns(i64 n, i64 c, i64 h, i64 w, i64 out_w, i64 padded, i64 step, i64 shift, i64 sn,
                                             i64 sc, i64 sh, i64 sw, const unsigned char* x, unsigned char* y) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    const bool fits = KILN_FITS_32(n * h * out_w);
    if (padded == 4 && fits)
        fold_columns<4, unsigned>((unsigned)n, c, (unsigned)h, w, (unsigned)out_w, step, shift, sn, sc, sh, sw, x, y);
    else if (padded == 4)
        fold_columns<4, i64>(n, c, h, w, out_w, step, shift, sn, sc, sh, sw, x, y);
    else if (fits)
        fold_columns<8, unsigned>((unsigned)n, c, (unsigned)h, w, (unsigned)out_w, step, shift, sn, sc, sh, sw, x, y);
    else
        fold_columns<8, i64>(n, c, h, w, out_w, step, shift, sn, sc, sh, sw, x, y);
}
