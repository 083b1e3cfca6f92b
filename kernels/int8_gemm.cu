// INT8 matrix products on Hopper, warp-specialized: y[rows][cols] = levels of x[rows][depth] ·
// w[cols][depth]ᵀ, the requantizing levels-only epilogue fused (int8_conv.cu's LEVELS: the exact
// int32 sum plus the int32 bias, times the channel's scale, rounded, clamped, then a second
// quantization's table where the layer has one). The host sends it a pointwise layer (a 1×1
// convolution over NHWC, or a matrix product) whose epilogue has no lookup and no join; every
// other INT8 layer runs int8_conv.cu. kiln-cpu's integer layer is the oracle.
//
// Why another kernel: int8_conv.cu's wgmma loop has every thread copy (cp.async) and every step
// wait at a block barrier, so its epilogue and prologue, more than half of a block's
// instructions at BERT's depth of 768, overlap nothing. Here one block per multiprocessor stays
// resident over all its tiles:
// - warpgroup 0 is the producer: one thread has the TMA copy each stage's tiles (swizzled as
//   wgmma reads them, zeros past the edges) into a ring, each stage guarded by a "full" barrier
//   the copies complete and an "empty" barrier its consumer releases;
// - warpgroups 1 and 2 are consumers, taking alternate tiles of 64 rows × 128 columns: while
//   one runs its epilogue the other's MMAs keep the tensor cores busy.
#include "common.cuh"
#include "wgmma.cuh"
#include "tma.cuh"

#define IG_BM 64                        // rows of a consumer's tile (one wgmma m64)
#define IG_BN 128                       // columns (filters) of a tile
#define IG_BK 128                       // depth bytes a stage holds: one 128-byte swizzled row
#define IG_STAGES 7
#define IG_CONSUMERS 2
#define IG_THREADS (128 * (1 + IG_CONSUMERS))
#define IG_A_BYTES (IG_BM * IG_BK)
#define IG_STAGE_BYTES ((IG_BM + IG_BN) * IG_BK)
#define IG_OUT_PITCH (IG_BN + 16)       // a consumer's output tile's rows: 16-byte pieces, spread banks
#define IG_OUT_BYTES (IG_BM * IG_OUT_PITCH)
#define IG_ALIGN 1024                   // the 128-byte swizzle's pattern repeats every 8 rows

// The dynamic shared memory: the ring's stages (1024-aligned), the consumers' output tiles, the
// barriers and the second quantization's table. The host's `SHARED_BYTES` is this plus IG_ALIGN.
struct GemmShared {
    unsigned char stages[IG_STAGES][IG_STAGE_BYTES];
    unsigned char out[IG_CONSUMERS][IG_OUT_BYTES];
    unsigned long long full[IG_STAGES], empty[IG_STAGES];
    unsigned long long mainloop_done[IG_CONSUMERS];  // a phase per tile whose stages its consumer has all waited for
    unsigned char then_levels[256];
};

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// Tile t covers rows [64 · (t / column_blocks), + 64) and columns [128 · (t % column_blocks),
// + 128): column blocks vary fastest, so the blocks running together share their rows in L2.
// Block b's tiles are b, b + gridDim.x, …; its consumer c takes the c-th of every two. Stage
// slot `pos` (counted over the block's tiles in order, `depth_steps` each) is stage pos % STAGES,
// on its barriers' phase pos / STAGES.
extern "C" __global__ void __launch_bounds__(IG_THREADS, 1)
    int8_gemm_tma_levels(const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map, int rows, int cols, int depth,
                         const int* int_bias, const float* scale, i64 scale_len, const float* float_bias, i64 float_bias_len, float y_scale,
                         float y_zero, float lo, float hi, int relu, const void* residual, int residual_type, float residual_scale,
                         float residual_zero, const unsigned char* then, const unsigned char* lookup, const void* join,
                         const float* join_params, int out_type, unsigned char* y) {
    extern __shared__ __align__(16) unsigned char dynamic_smem[];
    GemmShared& sm = *reinterpret_cast<GemmShared*>(dynamic_smem + (IG_ALIGN - shared_address(dynamic_smem) % IG_ALIGN) % IG_ALIGN);
    const int tid = threadIdx.x, warpgroup = tid / 128;
    const int column_blocks = (cols + IG_BN - 1) / IG_BN, tiles = (rows + IG_BM - 1) / IG_BM * column_blocks;
    const int depth_steps = (depth + IG_BK - 1) / IG_BK;
    if (tid == 0) {
        for (int s = 0; s < IG_STAGES; ++s) {
            barrier_init(&sm.full[s], 1);  // the producer's arrival; the copies' bytes complete it
            barrier_init(&sm.empty[s], 4);  // one lane of each of the consumer's four warps
        }
        for (int c = 0; c < IG_CONSUMERS; ++c) barrier_init(&sm.mainloop_done[c], 4);
        barrier_init_fence();
    }
    if (then)
        for (int i = tid; i < 256; i += IG_THREADS) sm.then_levels[i] = then[i];
    __syncthreads();

    if (warpgroup == 0) {
        if (tid != 0) return;
        int pos = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int m0 = t / column_blocks * IG_BM, n0 = t % column_blocks * IG_BN;
            for (int step = 0; step < depth_steps; ++step, ++pos) {
                const int s = pos % IG_STAGES;
                barrier_wait(&sm.empty[s], (pos / IG_STAGES + 1) & 1);
                barrier_expect_bytes(&sm.full[s], IG_STAGE_BYTES);
                tma_load_2d(sm.stages[s], &x_map, step * IG_BK, m0, &sm.full[s]);
                tma_load_2d(sm.stages[s] + IG_A_BYTES, &w_map, step * IG_BK, n0, &sm.full[s]);
            }
        }
        return;
    }

    const int consumer = warpgroup - 1, warp = (tid / 32) % 4, lane = tid % 32;
    // The levels' bounds less the zero point (ReLU's floor included): level_of_sum's.
    const int zero = (int)y_zero, high = (int)hi, low = relu ? max((int)lo, zero) : (int)lo;
    const float low_f = (float)(low - zero), high_f = (float)(high - zero);
    const bool per_channel = scale_len != 1;
    unsigned char* out_tile = sm.out[consumer];
    int acc[IG_BN / 2];
    for (int t = blockIdx.x + consumer * gridDim.x, seq = consumer; t < tiles; t += IG_CONSUMERS * gridDim.x, seq += IG_CONSUMERS) {
        const int m0 = t / column_blocks * IG_BM, n0 = t % column_blocks * IG_BN;
#pragma unroll
        for (int i = 0; i < IG_BN / 2; ++i) acc[i] = 0;
        // Main loops take turns: this tile's starts once the other consumer's previous one has
        // waited for all its stages (its k-th tile, k = (seq - 1) / 2, completes that phase). So
        // every slot before this tile's is filled and no wait below can mistake a stage's phase
        // two rounds back for its own; and one consumer's epilogue runs beside the other's MMAs.
        if (seq > 0) barrier_wait(&sm.mainloop_done[1 - consumer], ((seq - 1) / 2) & 1);
        int pos = seq * depth_steps;
        for (int step = 0; step < depth_steps; ++step, ++pos) {
            const int s = pos % IG_STAGES;
            barrier_wait(&sm.full[s], (pos / IG_STAGES) & 1);
            const unsigned long long a = wgmma_descriptor_sw128(sm.stages[s], 8 * IG_BK);
            const unsigned long long b = wgmma_descriptor_sw128(sm.stages[s] + IG_A_BYTES, 8 * IG_BK);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            // 32 bytes of depth a wgmma: 2 in the descriptors' 16-byte units, before the swizzle.
#pragma unroll
            for (int k = 0; k < IG_BK / 32; ++k) wgmma_s8<IG_BN>(acc, a + 2 * k, b + 2 * k);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            // The previous step's MMAs are done (this one's run on): release its stage.
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (step > 0 && lane == 0) barrier_arrive(&sm.empty[(pos - 1) % IG_STAGES]);
        }
        if (lane == 0) barrier_arrive(&sm.mainloop_done[consumer]);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wgmma_fence_operands<IG_BN / 2>(acc);
        if (lane == 0) barrier_arrive(&sm.empty[(pos - 1) % IG_STAGES]);

        // Accumulator 4·j + i: row 16·warp + lane / 4 (+ 8 for i ≥ 2), column 8·j + 2·(lane % 4)
        // + i % 2. Each warp gathers its 16 rows' levels in its rows of the output tile.
#pragma unroll
        for (int j = 0; j < IG_BN / 8; ++j) {
            const int col = 8 * j + 2 * (lane % 4);
            const int c0 = min(n0 + col, cols - 1), c1 = min(n0 + col + 1, cols - 1);
            const float s0 = scale[per_channel ? c0 : 0], s1 = scale[per_channel ? c1 : 0];
            const int b0 = int_bias ? int_bias[c0] : 0, b1 = int_bias ? int_bias[c1] : 0;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = 16 * warp + lane / 4 + 8 * half;
                unsigned char l0 = level_of_sum(acc[4 * j + 2 * half] + b0, s0, low_f, high_f, zero);
                unsigned char l1 = level_of_sum(acc[4 * j + 2 * half + 1] + b1, s1, low_f, high_f, zero);
                if (then) {
                    l0 = sm.then_levels[l0];
                    l1 = sm.then_levels[l1];
                }
                *reinterpret_cast<uchar2*>(out_tile + row * IG_OUT_PITCH + col) = make_uchar2(l0, l1);
            }
        }
        __syncwarp();
        // The warp's 16 rows leave in 16-byte pieces (cols is a multiple of 16: the host's check).
#pragma unroll
        for (int i = 0; i < 16 * IG_BN / 16 / 32; ++i) {
            const int piece = lane + 32 * i, row = 16 * warp + piece / (IG_BN / 16), col = piece % (IG_BN / 16) * 16;
            const i64 m = (i64)m0 + row;
            if (m < rows && n0 + col < cols)
                *reinterpret_cast<uint4*>(y + m * cols + n0 + col) = *reinterpret_cast<const uint4*>(out_tile + row * IG_OUT_PITCH + col);
        }
        __syncwarp();
    }
}
#endif
