// INT8 2-D convolution as an implicit GEMM on tensor cores, with the requantizing epilogue of
// explicit quantization fused: int8 NHWC in, int8 / uint8 (or f32) NHWC out, no int32 sums in memory.
//
// The product is [pixels, r·s·c] · [k, r·s·c]ᵀ: row m of A is output pixel m's receptive field
// read straight from the NHWC input (zeros in the padding), B is the filter stored [k][r][s][c].
// A block of 8 warps owns 128 pixels × BN filters and walks r·s·c 64 channels at a time: both
// tiles arrive by cp.async into one of two shared buffers while the other feeds mma.sync
// m16n8k32 (s8 × s8 → s32) through ldmatrix. Channels are a multiple of 16 (the host pads them
// with int8_pad_channels below), so each 16-byte copy lies within one filter tap.
//
// The epilogue is quant_requantize's (typed.cu) operation for operation: the exact sum plus the
// int32 bias, rounded once to f32, times the channel's scale, plus a float bias, then the float
// output or the level (round half to even, ReLU at the zero point, saturation). kiln-cpu's
// integer layer is the oracle.
#include "common.cuh"
#include "mma.cuh"

#define IC_BM 128
#define IC_BK 64             // int8 channels per stage
#define IC_LD (IC_BK + 16)   // 80-byte rows: the 8 rows one ldmatrix reads fall in different banks
#define IC_THREADS 256
#define IC_CHUNKS (IC_BK / 16)

// Output type codes: kiln-cuda's ops::typed::type_code.
#define IC_F32 0
#define IC_I8 4
#define IC_U8 8

__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The epilogue's operands (the host's `quant::Epilogue` arguments, in this order).
struct Requant {
    const int* int_bias;
    const float* scale;
    i64 scale_len;
    const float* float_bias;
    i64 float_bias_len;
    float y_scale, y_zero, lo, hi;
    int relu, out_type;
};

// One output channel's epilogue operands, loaded once per thread.
struct Channel {
    float scale, float_bias;
    int int_bias;
};

__device__ __forceinline__ Channel channel(const Requant& e, int ch) {
    Channel c;
    c.scale = e.scale[e.scale_len == 1 ? 0 : ch];
    c.float_bias = e.float_bias ? e.float_bias[e.float_bias_len == 1 ? 0 : ch] : 0.0f;
    c.int_bias = e.int_bias ? e.int_bias[ch] : 0;
    return c;
}

// The sum scaled, with the float bias: the float output before its ReLU.
__device__ __forceinline__ float scaled(const Requant& e, const Channel& c, int acc) {
    float v = __fmul_rn(__ll2float_rn((long long)acc + c.int_bias), c.scale);
    return e.float_bias ? __fadd_rn(v, c.float_bias) : v;
}

// The requantized level's byte (int8 or uint8).
__device__ __forceinline__ unsigned char level_byte(const Requant& e, float v) {
    if (e.float_bias) v = __fdiv_rn(v, e.y_scale);
    float level = rintf(v);
    if (e.relu) level = fmaxf(level, 0.0f);
    level = fminf(fmaxf(level + e.y_zero, e.lo), e.hi);
    return e.out_type == IC_I8 ? (unsigned char)(signed char)(int)level : (unsigned char)(int)level;
}

// `win` gives the sizes (NCHW names; the tensors are NHWC, the filter [k][r][s][c]).
template <int BN, int WARPS_M, int WARPS_N>
__device__ __forceinline__ void int8_conv(const Window& win, const signed char* __restrict__ x, const signed char* __restrict__ wt,
                                          const Requant& e, void* __restrict__ y) {
    constexpr int WM = IC_BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
    static_assert(WARPS_M * WARPS_N * 32 == IC_THREADS, "8 warps");
    static_assert(NT % 2 == 0, "B fragments load two n-tiles at a time");
    constexpr int A_CHUNKS = IC_BM * IC_CHUNKS / IC_THREADS, B_CHUNKS = BN * IC_CHUNKS / IC_THREADS;
    __shared__ __align__(16) signed char as[2][IC_BM][IC_LD];
    __shared__ __align__(16) signed char bs[2][BN][IC_LD];

    const int n = (int)win.n, h = (int)win.h, w = (int)win.w, c = (int)win.c, k = (int)win.oc, r = (int)win.kh, s = (int)win.kw;
    const int p = (int)win.oh, q = (int)win.ow, stride_h = (int)win.sh, stride_w = (int)win.sw;
    const int pad_h = (int)win.ph, pad_w = (int)win.pw, dil_h = (int)win.dh, dil_w = (int)win.dw;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const i64 pixels = (i64)n * p * q;
    const int depth = r * s * c;
    const i64 m0 = (i64)blockIdx.x * IC_BM;
    const int n0 = blockIdx.y * BN;

    // This thread's copies: the same 16 channels of A_CHUNKS pixels and B_CHUNKS filters at
    // every step, so each pixel's origin is found once.
    const int col = (tid % IC_CHUNKS) * 16;
    const signed char* a_image[A_CHUNKS];
    int a_ih[A_CHUNKS], a_iw[A_CHUNKS];
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) {
        const i64 m = m0 + (tid + i * IC_THREADS) / IC_CHUNKS;
        const bool in = m < pixels;
        const i64 img = in ? m / ((i64)p * q) : 0;
        const int pq = in ? (int)(m - img * p * q) : 0;
        a_image[i] = x + img * h * w * c;
        a_ih[i] = in ? (pq / q) * stride_h - pad_h : -(1 << 30);
        a_iw[i] = (pq % q) * stride_w - pad_w;
    }

    auto load = [&](int stage, int step) {
        const int kg = step * IC_BK + col;
        const bool k_in = kg < depth;
        const int cc = kg % c, tap = kg / c, ih_off = (tap / s) * dil_h, iw_off = (tap % s) * dil_w;
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int row = (tid + i * IC_THREADS) / IC_CHUNKS;
            const int ih = a_ih[i] + ih_off, iw = a_iw[i] + iw_off;
            const bool valid = k_in && ih >= 0 && ih < h && iw >= 0 && iw < w;
            cp_async16(&as[stage][row][col], valid ? a_image[i] + ((i64)ih * w + iw) * c + cc : x, valid);
        }
#pragma unroll
        for (int j = 0; j < B_CHUNKS; ++j) {
            const int row = (tid + j * IC_THREADS) / IC_CHUNKS;
            const bool valid = k_in && n0 + row < k;
            cp_async16(&bs[stage][row][col], valid ? wt + (i64)(n0 + row) * depth + kg : wt, valid);
        }
        cp_async_commit();
    };

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0;

    const int steps = (depth + IC_BK - 1) / IC_BK;
    load(0, 0);
#pragma unroll 1
    for (int step = 0; step < steps; ++step) {
        const int cur = step & 1;
        if (step + 1 < steps) {
            load(cur ^ 1, step + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < IC_BK; ks += 32) {
            unsigned af[MT][4], bf[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                ldmatrix_x4(&as[cur][warp_m * WM + mt * 16 + (lane % 8) + ((lane / 8) % 2) * 8][ks + (lane / 16) * 16], af[mt]);
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                unsigned b[4];
                ldmatrix_x4(&bs[cur][warp_n * WN + nt * 8 + (lane % 8) + (lane / 16) * 8][ks + ((lane / 8) % 2) * 16], b);
                bf[nt][0] = b[0];
                bf[nt][1] = b[1];
                bf[nt + 1][0] = b[2];
                bf[nt + 1][1] = b[3];
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma_s8(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
        __syncthreads();
    }

    // Accumulator (mt, nt): elements 0, 1 at row lane/4, channels 2·(lane%4) + {0, 1}; 2, 3 eight rows down.
    if (e.out_type == IC_F32) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int ch = n0 + warp_n * WN + nt * 8 + (lane % 4) * 2;
            const Channel c[2] = {channel(e, min(ch, k - 1)), channel(e, min(ch + 1, k - 1))};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const i64 m = m0 + warp_m * WM + mt * 16 + lane / 4 + half * 8;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        if (m >= pixels || ch + j >= k) continue;
                        const float v = scaled(e, c[j], acc[mt][nt][half * 2 + j]);
                        ((float*)y)[m * k + ch + j] = e.relu ? fmaxf(v, 0.0f) : v;
                    }
                }
        }
        return;
    }
    // Levels: the block's [128 pixels][BN filters] bytes gather in shared memory (the operand
    // tiles are free), then leave in 16-byte row pieces: scattered byte stores were most of the
    // time of a convolution with few input channels.
    typedef unsigned char OutRow[BN + 16];
    static_assert(sizeof(OutRow) * IC_BM <= sizeof(as), "the output tile fits where A was");
    OutRow* tile = reinterpret_cast<OutRow*>(&as[0][0][0]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int col = warp_n * WN + nt * 8 + (lane % 4) * 2, ch = n0 + col;
        const Channel c[2] = {channel(e, min(ch, k - 1)), channel(e, min(ch + 1, k - 1))};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = warp_m * WM + mt * 16 + lane / 4 + half * 8;
                const unsigned char b0 = level_byte(e, scaled(e, c[0], acc[mt][nt][half * 2]));
                const unsigned char b1 = level_byte(e, scaled(e, c[1], acc[mt][nt][half * 2 + 1]));
                *reinterpret_cast<uchar2*>(&tile[row][col]) = make_uchar2(b0, b1);
            }
    }
    __syncthreads();
    unsigned char* out = (unsigned char*)y;
    const bool vector = k % 16 == 0 && ((size_t)out % 16) == 0;
#pragma unroll 1
    for (int piece = tid; piece < IC_BM * (BN / 16); piece += IC_THREADS) {
        const int row = piece / (BN / 16), col = (piece % (BN / 16)) * 16;
        const i64 m = m0 + row;
        if (m >= pixels || n0 + col >= k) continue;
        if (vector) {
            *reinterpret_cast<uint4*>(out + m * k + n0 + col) = *reinterpret_cast<const uint4*>(&tile[row][col]);
        } else {
            for (int j = 0; j < 16 && n0 + col + j < k; ++j) out[m * k + n0 + col + j] = tile[row][col + j];
        }
    }
}

#define INT8_CONV(NAME, BN, WARPS_M, WARPS_N)                                                                              \
    extern "C" __global__ void __launch_bounds__(IC_THREADS)                                                                \
        NAME(Window win, const signed char* x, const signed char* wt, const int* int_bias, const float* scale,             \
             i64 scale_len, const float* float_bias, i64 float_bias_len, float y_scale, float y_zero, float lo, float hi,   \
             int relu, int out_type, void* y) {                                                                             \
        const Requant e = {int_bias, scale, scale_len, float_bias, float_bias_len, y_scale, y_zero, lo, hi, relu, out_type}; \
        int8_conv<BN, WARPS_M, WARPS_N>(win, x, wt, e, y);                                                                 \
    }

// 128 filters per block (warps 2 × 4, each 64 pixels × 32 filters), and 64 for narrow layers
// (warps 4 × 2, each 32 × 32).
INT8_CONV(int8_conv_bn128, 128, 2, 4)
INT8_CONV(int8_conv_bn64, 64, 4, 2)

// An 8-bit [n, c, h, w] tensor (element strides sn, sc, sh, sw: any layout) as packed NHWC with
// its channels zero-padded to `padded`, a multiple of 16: one 16-byte piece per thread. How an
// RGB stem, or any channel count short of 16s, reaches the convolution above.
extern "C" __global__ void int8_pad_channels(i64 n, i64 c, i64 h, i64 w, i64 padded, i64 sn, i64 sc, i64 sh, i64 sw,
                                             const unsigned char* x, unsigned char* y) {
    const i64 per_pixel = padded / 16, total = n * h * w * per_pixel;
    KILN_GRID_LOOP(i, total) {
        i64 pixel = i / per_pixel;
        const i64 first = (i % per_pixel) * 16, iw = pixel % w;
        pixel /= w;
        const i64 ih = pixel % h, in = pixel / h;
        const unsigned char* src = x + in * sn + ih * sh + iw * sw;
        uint4 piece;
        unsigned char* bytes = reinterpret_cast<unsigned char*>(&piece);
#pragma unroll
        for (int j = 0; j < 16; ++j) bytes[j] = first + j < c ? src[(first + j) * sc] : 0;
        reinterpret_cast<uint4*>(y)[i] = piece;
    }
}
