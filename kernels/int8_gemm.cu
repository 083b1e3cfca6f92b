// INT8 matrix products on Hopper, warp-specialized: y[rows][cols] = levels of x[rows][depth] ·
// w[cols][depth]ᵀ, the requantizing levels-only epilogue fused (int8_conv.cu's LEVELS: the exact
// int32 sum plus the int32 bias, times the channel's scale, rounded, clamped, then a second
// quantization's table where the layer has one, or the levels looked up in their column's row of
// a per-column table). The host sends it a pointwise layer (a 1×1 convolution over NHWC, or a
// matrix product) whose epilogue has no join but in 64 × 128 tiles (`int8_gemm_tma_join`: the
// second levels of a skip connection's join looked up in a table of every pair of bytes), and
// any other convolution with the levels-only epilogue (`int8_gemm_tma_conv…`: implicit GEMM,
// the activations gathered by the producer warpgroup); every other INT8 layer runs
// int8_conv.cu. kiln-cpu's integer layer is the oracle.
//
// Why another kernel: int8_conv.cu's wgmma loop has every thread copy (cp.async) and every step
// wait at a block barrier, so its epilogue and prologue, more than half of a block's
// instructions at BERT's depth of 768, overlap nothing. Here one block per multiprocessor stays
// resident over all its tiles:
// - warpgroup 0 is the producer: one thread has the TMA copy each stage's tiles (swizzled as
//   wgmma reads them, zeros past the edges) into a ring, each stage guarded by a "full" barrier
//   the copies complete and an "empty" barrier its consumer releases;
// - the other CONSUMERS warpgroups are consumers, taking tiles in turn, of 64 · HALVES rows ×
//   128 columns (HALVES wgmma m64 row blocks sharing each stage's filters: 128 rows read half
//   the filter bytes from L2 a product that 64 do, for half the tiles), or of 64 × 192 (768
//   columns in four blocks: BERT's 4,096-row products then two tiles a multiprocessor): while
//   one runs its epilogue the others' MMAs keep the tensor cores busy. The 64 × 128 kernels have
//   three consumers: at BERT's depth of 768 a tile's epilogue takes about twice its main loop
//   (with none, BERT b32 ran 1.27 ms, not 1.65), so two others' main loops cover it; 128-row
//   tiles' accumulators leave registers for two. COOP kernels (`…_m256`) put both consumers
//   on each 256-row tile instead, 128 rows apiece over one stage's filters: no turns, so their
//   epilogues overlap only the producer's next loads.
// A consumer's scales for its tile's columns are read from global memory before its main loop
// and staged in shared memory after it, so the epilogue does not wait on them; its sums start
// at their columns' int32 biases.
// A lookup (`int8_gemm_tma_lookup`) needs its tile's 128 rows of the table (32 KB) at the store:
// the producer copies them into the consumer's table buffer in one bulk copy, only where the
// consumer's tile changes columns, guarded by a full / empty barrier pair of its own; the ring
// then holds 4 stages, not 6 or 7, to fit the consumers' tables. (Scattered global lookups measured
// slower than the island they replace: int8_conv.cu stages its rows the same way.)
// A join (`int8_gemm_tma_join`: `DQ(level) + DQ(join) → Add → [Relu] → QuantizeLinear`, a
// ResNet block's end) looks each second level up in a 64 KiB table of every (join byte, level
// byte) pair, which the host computes as the oracle does (kiln::plan::requantization's
// joined_levels) and the block copies into shared memory once: three permutes and a load a
// byte, where int8_conv.cu's arithmetic join takes about 14 instructions and a tie test. The
// consumers copy their next tile's join bytes (cp.async) while this tile's are looked up:
// the copy waits beside the stores and the next main loop (0.3% faster on ResNet-50 than
// loading them into registers before each main loop, and 9 registers fewer).
// A join on a line (`int8_gemm_tma_join_line`, where the host found one that gives the table's
// level for every pair: kiln::plan::join_line) computes each second level from the first
// level's rounding word and the join byte with two integer multiply-adds, a shift, a floor and a
// saturating pack: no table, and none of the scattered byte loads that bound the table kernel's
// shared memory. The join bytes are read in the accumulators' layout, so only second levels reach the
// output tile.
// A convolution (`int8_gemm_tma_conv…`): the product is [pixels, r·s·c] · [k, r·s·c]ᵀ as in
// int8_conv.cu (NHWC input, channels a multiple of 16, KRSC filter). The filter tiles still come
// by TMA; the activation tiles are gathered by the producer warpgroup's 128 threads, each a
// 16-byte piece of depth (one tap's channels) of every 16th row, by cp.async into the stage's
// 128-byte swizzle (zeros for padding taps and past the edges). Each thread's copies arrive on
// the stage's full barrier as they complete (`cp.async.mbarrier.arrive.noinc`: the count is the
// TMA's arrival and the 128 threads'), so the producer never waits for its own copies and as
// many stages load at once as the ring holds; a consumer makes them visible to wgmma's async
// proxy (`fence.proxy.async`) after its wait. The consumers and their epilogue are the
// product's: a convolution's fixed costs (its pixels' coordinates, the taps' validity) move to
// the producer, beside the MMAs, where int8_conv.cu's wgmma loop pays them in every warp between
// a block barrier and its MMAs.
#include "common.cuh"
#include "wgmma.cuh"
#include "tma.cuh"
#include "mma.cuh"

#define IG_BM 64                        // rows of one wgmma m64; a consumer's tile has HALVES of them
#define IG_BN 128                       // columns (filters) of a tile, unless the kernel says COLS
#define IG_BK 128                       // depth bytes a stage holds: one 128-byte swizzled row
#define IG_THREADS(CONSUMERS) (128 * (1 + (CONSUMERS)))
// Where slot `pos` of a ring of STAGES stages is (stage pos % STAGES, its barriers' phase
// pos / STAGES), stepped a slot at a time: a signed slot's modulo and quotient were a dozen
// instructions a stage in each main loop (SASS, session 59).
template <int STAGES>
struct RingSlot {
    unsigned stage, phase;
    __device__ explicit RingSlot(unsigned pos) : stage(pos % STAGES), phase((pos / STAGES) & 1) {}
    __device__ void next() {
        if (++stage == STAGES) stage = 0, phase ^= 1;
    }
};
#define IG_A_BYTES(HALVES) (IG_BM * (HALVES) * IG_BK)
#define IG_STAGE_BYTES(HALVES, COLS) ((IG_BM * (HALVES) + (COLS)) * IG_BK)
#define IG_OUT_PITCH(COLS) ((COLS) + 16)  // a consumer's output rows: 16-byte pieces, spread banks
#define IG_OUT_BYTES(COLS) (IG_BM * IG_OUT_PITCH(COLS))  // one m64 block's levels: the halves leave in turn
#define IG_TABLE_BYTES (IG_BN * 256)    // a tile's rows of a lookup table

// The consumers' and barriers' part of the shared memory, every kernel's (fields, so that each
// kernel's shared memory stays one flat struct): the output tiles and lookup tables (16 bytes
// where the kernel has none), the columns' scales (two tiles' worth, alternating; the sums start
// at their int32 biases), the barriers and the second quantization's table.
#define IG_GEMM_PARTS(STAGES, TABLE_BYTES, COLS, CONSUMERS)                                                          \
    unsigned char out[CONSUMERS][IG_OUT_BYTES(COLS)];                                                                 \
    unsigned char tables[CONSUMERS][TABLE_BYTES];                                                                     \
    float column_scale[CONSUMERS][2][COLS];                                                                           \
    unsigned long long full[STAGES], empty[STAGES];                                                                   \
    unsigned long long mainloop_done[CONSUMERS]; /* a phase per tile whose stages its consumer has all waited for */ \
    unsigned long long table_full[CONSUMERS], table_empty[CONSUMERS];                                                 \
    unsigned char then_levels[256];

// The dynamic shared memory: the ring's stages (1024-aligned), then IG_GEMM_PARTS. The host's
// `shared_bytes` (which still counts two tiles' int32 biases) is this plus 1024 (sw128_padding).
template <int STAGES, int TABLE_BYTES, int HALVES, int COLS, int CONSUMERS>
struct GemmShared {
    unsigned char stages[STAGES][IG_STAGE_BYTES(HALVES, COLS)];
    IG_GEMM_PARTS(STAGES, TABLE_BYTES, COLS, CONSUMERS)
};

// A join kernel's shared memory: IG_GEMM_PARTS and the consumers' join tiles, the join table at
// shared address 64 KiB (IG_JOIN_TABLE_AT: an entry's address is then one permute of the
// table's upper half-word and the two bytes) and the stages after it, 1024-aligned at 128 KiB.
// The block's dynamic shared memory starts at its 1 KiB of reserved shared memory on Hopper,
// well below the table's offset in the struct: the struct starts at 64 KiB less that offset.
#define IG_JOIN_TABLE_AT 65536
#define IG_JOIN_TABLE_BYTES 65536
template <int STAGES, int CONSUMERS>
struct JoinFront {
    IG_GEMM_PARTS(STAGES, 16, IG_BN, CONSUMERS)
    // Each consumer's next tile of join bytes (cp.async), a warp's 16 rows 2 KiB apart.
    alignas(16) unsigned char join_tiles[CONSUMERS][IG_BM * IG_BN];
};
template <int STAGES, int CONSUMERS>
struct JoinShared : JoinFront<STAGES, CONSUMERS> {
    // The table's offset in the struct: the front rounded up to its alignment.
    static constexpr unsigned TABLE_OFFSET = (sizeof(JoinFront<STAGES, CONSUMERS>) + 1023) / 1024 * 1024;
    alignas(1024) unsigned char join_table[IG_JOIN_TABLE_BYTES];
    unsigned char stages[STAGES][IG_STAGE_BYTES(1, IG_BN)];
};

// A line join's shared memory (`int8_gemm_tma_join_line`): no table, so the stages first as
// GemmShared's; the consumers' join tiles with rows IG_LINE_PITCH apart, so that a warp's byte
// reads in the accumulators' layout (8 rows, each 4 lanes' pairs) fall in distinct banks.
#define IG_LINE_PITCH (IG_BN + 16)
template <int STAGES, int CONSUMERS>
struct JoinLineShared {
    unsigned char stages[STAGES][IG_STAGE_BYTES(1, IG_BN)];
    IG_GEMM_PARTS(STAGES, 16, IG_BN, CONSUMERS)
    alignas(16) unsigned char join_tiles[CONSUMERS][IG_BM * IG_LINE_PITCH];
};

template <bool C, typename A, typename B> struct Either { typedef A type; };
template <typename A, typename B> struct Either<false, A, B> { typedef B type; };

// Whether the join table's rows are swizzled: byte y of row v (join byte v) at word
// (y / 4) ^ (v % 32), so that lanes reading one level beside different join bytes spread over
// the banks (a row's 64 words cover the 32 banks twice: unswizzled, equal levels meet in one).
#define IG_JOIN_SWIZZLE 1

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// Which tiles block b runs, in order: its `j`-th is tile `tile(j)` of `count`, the tile of rows
// [ROWS · m, + ROWS) and columns [COLS · n, + COLS); its consumer c takes every j ≡ c (mod CONSUMERS).
// - Levels: tiles b, b + gridDim.x, … with columns fastest, so the blocks running together share
//   their rows in L2.
// - A lookup: one contiguous run of tiles, rows fastest, so a consumer's next tile mostly keeps
//   its columns and its table (round robin would change them at nearly every tile where the
//   column blocks do not divide 2 · gridDim.x: a 32 KB copy, and the producer waiting for the
//   release, a tile).
template <bool LOOKUP, int ROWS, int COLS, int CONSUMERS>
struct Schedule {
    int row_blocks, column_blocks, first, count;
    // A tile's m and n without a division (a consumer asks for each tile's m and n three times,
    // and each division was about 25 instructions of a 64-row tile's ~1,500): the quotient by the
    // fastest dimension's blocks from their reciprocal, corrected once (exact below 2^22 tiles:
    // the product's error is under one half; the host keeps the tiles below). A multiply-high by
    // a magic number cost every thread a 64-bit division to set up, more than it saved where a
    // consumer has one or two tiles: RegNetY-800MF at batch 32 ran 0.8% slower.
    float reciprocal;
    __device__ Schedule(int rows, int cols) {
        row_blocks = (rows + ROWS - 1) / ROWS;
        column_blocks = (cols + COLS - 1) / COLS;
        reciprocal = __frcp_rn((float)(LOOKUP ? row_blocks : column_blocks));
        const long long tiles = (long long)row_blocks * column_blocks;
        if (LOOKUP) {
            first = (int)(tiles * blockIdx.x / gridDim.x);
            count = (int)(tiles * (blockIdx.x + 1) / gridDim.x) - first;
        } else {
            first = blockIdx.x;
            count = (int)((tiles - blockIdx.x + gridDim.x - 1) / gridDim.x);
        }
    }
    __device__ int tile(int j) const { return LOOKUP ? first + j : first + j * (int)gridDim.x; }
    // tile(j) divided by the fastest dimension's blocks.
    __device__ int quotient(int t) const {
        const int blocks = LOOKUP ? row_blocks : column_blocks;
        const int q = __float2int_rz(__int2float_rn(t) * reciprocal), r = t - q * blocks;
        return q + (r >= blocks) - (r < 0);
    }
    __device__ int m(int j) const {
        const int t = tile(j), q = quotient(t);
        return LOOKUP ? t - q * row_blocks : q;
    }
    __device__ int n(int j) const {
        const int t = tile(j), q = quotient(t);
        return LOOKUP ? q : t - q * column_blocks;
    }
    // Whether the consumer's tile j needs its rows of the lookup table copied: its first, or
    // columns other than its previous tile's. The producer and the consumer ask alike.
    __device__ bool new_table(int j) const { return j < CONSUMERS || n(j) != n(j - CONSUMERS); }
};

// A warp's levels of one m64 block of accumulators into its 16 rows of the output tile.
// Accumulator 4·j + i: row 16·warp + lane / 4 (+ 8 for i ≥ 2), column 8·j + 2·(lane % 4) + i % 2.
template <int COLS>
// The sums start at their columns' int32 biases (bias_first), so none is added here.
__device__ __forceinline__ void store_levels(const int (&acc)[COLS / 2], const float* scales, const unsigned char* then_levels,
                                             unsigned char* out_tile, int warp, int lane, float low_f, float high_f, int zero) {
    // Each pair's scales are read a pair ahead: read where used, the compiler kept each pair's
    // loads after the previous pair's store, and the shared memory's latency in every pair's
    // arithmetic (SASS, session 45).
    float2 scale = *reinterpret_cast<const float2*>(scales + 2 * (lane % 4));
#pragma unroll
    for (int j = 0; j < COLS / 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4), next = j + 1 < COLS / 8 ? col + 8 : col;
        const float s0 = scale.x, s1 = scale.y;
        scale = *reinterpret_cast<const float2*>(scales + next);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = 16 * warp + lane / 4 + 8 * half;
            unsigned l0 = level_word_of_sum(acc[4 * j + 2 * half], s0, low_f, high_f, zero);
            unsigned l1 = level_word_of_sum(acc[4 * j + 2 * half + 1], s1, low_f, high_f, zero);
            if (then_levels) {
                l0 = then_levels[l0 & 0xff];
                l1 = then_levels[l1 & 0xff];
            }
            *reinterpret_cast<unsigned short*>(out_tile + row * IG_OUT_PITCH(COLS) + col) = (unsigned short)__byte_perm(l0, l1, 0x0040);
        }
    }
}

// A join's line (kiln::plan::join_line::JoinLine, exact for every pair by the host's check):
// the second level of a first level's rounding word x and a join byte's value j (int8 or uint8
// as the join's type) is max((x·alpha + j·beta + gamma) >> shift, lo) in wrapping 32-bit
// arithmetic, saturated to int8 by the pack; a uint8 output's levels are offset by -128 there
// and their bytes flipped back (`flip`).
struct JoinLine {
    int alpha, beta, gamma, shift, lo;
    unsigned flip;  // 0x8080 for uint8 outputs, else 0
    bool signed_join;
};

__device__ __forceinline__ JoinLine join_line_of(const int* words) {
    return JoinLine{__ldg(words), __ldg(words + 1), __ldg(words + 2), __ldg(words + 3), __ldg(words + 4), (unsigned)__ldg(words + 5), __ldg(words + 6) != 0};
}

// The second level of a sum's first level (its rounding word: level_word_of_sum with no zero
// point added) joined with the join value j.
__device__ __forceinline__ int joined_on_line(const JoinLine& l, int sum, float scale, float low, float high, int j) {
    const int x = (int)level_word_of_sum(sum, scale, low, high, 0);
    return max((x * l.alpha + (j * l.beta + l.gamma)) >> l.shift, l.lo);
}

// Two levels saturated to int8 and packed, `low` in the low byte (PTX's cvt.pack: a above b).
__device__ __forceinline__ unsigned packed_int8_pair(int low, int high) {
    unsigned d;
    asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;\n" : "=r"(d) : "r"(high), "r"(low));
    return d;
}

// Shared loads and stores as volatile asm, which the compiler keeps in their written order:
// store_joined_levels then decides how far ahead of the output tile's stores the join tile's
// loads run. As plain accesses each load waited for the store before it (the compiler cannot
// tell the two tiles apart); as free-moving asm, every load was hoisted above the arithmetic
// and 16 registers spilled. A join byte loads as its value (sign-extended for int8), so no
// instruction extracts it.
template <bool SIGNED>
__device__ __forceinline__ int shared_byte_value(unsigned at) {
    int v;
    if (SIGNED)
        asm volatile("ld.shared.s8 %0, [%1];\n" : "=r"(v) : "r"(at));
    else
        asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(at));
    return v;
}

__device__ __forceinline__ void store_shared_u16(unsigned at, unsigned v) {
    asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(at), "h"((unsigned short)v));
}

// store_levels with the join's line: each first level's rounding word and its join byte (the
// warp's join tile at shared address `joins`, rows IG_LINE_PITCH apart, read in the
// accumulators' layout, a column group ahead) give the second level, which alone reaches the
// output tile (at shared address `out`).
template <int COLS, bool SIGNED>
__device__ __forceinline__ void store_joined_levels(const int (&acc)[COLS / 2], const float* scales, unsigned joins, const JoinLine& line, unsigned out,
                                                    int warp, int lane, float low_f, float high_f) {
    const int row = lane / 4;
    const unsigned at = joins + row * IG_LINE_PITCH + 2 * (lane % 4);
    float2 scale = *reinterpret_cast<const float2*>(scales + 2 * (lane % 4));
    // The join values of group j: rows `row` and `row + 8`, two columns each.
    const auto load = [&](int j, int (&b)[4]) {
        b[0] = shared_byte_value<SIGNED>(at + 8 * j);
        b[1] = shared_byte_value<SIGNED>(at + 8 * j + 1);
        b[2] = shared_byte_value<SIGNED>(at + 8 * IG_LINE_PITCH + 8 * j);
        b[3] = shared_byte_value<SIGNED>(at + 8 * IG_LINE_PITCH + 8 * j + 1);
    };
    int b[4];
    load(0, b);
#pragma unroll
    for (int j = 0; j < COLS / 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4), next = j + 1 < COLS / 8 ? col + 8 : col;
        const float s0 = scale.x, s1 = scale.y;
        scale = *reinterpret_cast<const float2*>(scales + next);
        const int here[4] = {b[0], b[1], b[2], b[3]};
        if (j + 1 < COLS / 8) load(j + 1, b);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int l0 = joined_on_line(line, acc[4 * j + 2 * half], s0, low_f, high_f, here[2 * half]);
            const int l1 = joined_on_line(line, acc[4 * j + 2 * half + 1], s1, low_f, high_f, here[2 * half + 1]);
            store_shared_u16(out + (16 * warp + row + 8 * half) * IG_OUT_PITCH(COLS) + col, packed_int8_pair(l0, l1) ^ line.flip);
        }
    }
    asm volatile("" ::: "memory");  // the stores above precede every access after
}

// The byte at shared address `at` + OFFSET.
template <int OFFSET>
__device__ __forceinline__ unsigned shared_byte(unsigned at) {
    unsigned v;
    asm volatile("ld.shared.u8 %0, [%1+%2];\n" : "=r"(v) : "r"(at), "n"(OFFSET));
    return v;
}

// common.cuh's looked_up16 for a tile's table in shared memory (`rows`: the shared address of
// the piece's first column's row, a multiple of 256): a byte's address is one permute (the row's
// upper bytes, the level as the low byte), the next columns' rows 256 · j on as the load's
// immediate offset.
template <int W>
__device__ __forceinline__ unsigned looked_up_word(unsigned rows, unsigned levels) {
    const unsigned b0 = shared_byte<1024 * W>(__byte_perm(levels, rows, 0x7650));
    const unsigned b1 = shared_byte<1024 * W + 256>(__byte_perm(levels, rows, 0x7651));
    const unsigned b2 = shared_byte<1024 * W + 512>(__byte_perm(levels, rows, 0x7652));
    const unsigned b3 = shared_byte<1024 * W + 768>(__byte_perm(levels, rows, 0x7653));
    return packed_bytes(b0, b1, b2, b3);
}

__device__ __forceinline__ uint4 looked_up_in_tile(unsigned rows, uint4 piece) {
    return make_uint4(looked_up_word<0>(rows, piece.x), looked_up_word<1>(rows, piece.y), looked_up_word<2>(rows, piece.z), looked_up_word<3>(rows, piece.w));
}

// The second levels of four first levels (`levels`) joined with four join bytes (`joins`),
// looked up in the join table at shared address `table` (IG_JOIN_TABLE_AT): two permutes pair
// each level with its join byte as a half-word (the entry's offset, join byte high), a third
// puts the table's upper half-word above it.
__device__ __forceinline__ unsigned joined_word(unsigned table, unsigned levels, unsigned joins) {
    unsigned low = __byte_perm(levels, joins, 0x5140), high = __byte_perm(levels, joins, 0x7362);
    if (IG_JOIN_SWIZZLE) {
        // The level's word index (bits 2-6 of each half) XOR the join byte's low 5 bits.
        low ^= (low >> 6) & 0x007C007Cu;
        high ^= (high >> 6) & 0x007C007Cu;
    }
    const unsigned b0 = shared_byte<0>(__byte_perm(low, table, 0x7610));
    const unsigned b1 = shared_byte<0>(__byte_perm(low, table, 0x7632));
    const unsigned b2 = shared_byte<0>(__byte_perm(high, table, 0x7610));
    const unsigned b3 = shared_byte<0>(__byte_perm(high, table, 0x7632));
    return packed_bytes(b0, b1, b2, b3);
}

__device__ __forceinline__ uint4 joined_in_table(unsigned table, uint4 levels, uint4 joins) {
    return make_uint4(joined_word(table, levels.x, joins.x), joined_word(table, levels.y, joins.y), joined_word(table, levels.z, joins.z),
                      joined_word(table, levels.w, joins.w));
}

// The join table (kiln's [join byte][level byte] order, in global memory) into shared memory,
// its rows swizzled as joined_word reads them, by every thread of the block.
__device__ __forceinline__ void copy_join_table(const unsigned char* from, unsigned char* table, int tid, int threads) {
#pragma unroll 4
    for (int i = tid; i < IG_JOIN_TABLE_BYTES / 16; i += threads) {
        const uint4 words = __ldg(reinterpret_cast<const uint4*>(from) + i);
        const int row = i / 16, word = (i % 16) * 4, swizzle = IG_JOIN_SWIZZLE ? row % 32 : 0;
        unsigned* to = reinterpret_cast<unsigned*>(table + row * 256);
        to[word ^ swizzle] = words.x;
        to[(word + 1) ^ swizzle] = words.y;
        to[(word + 2) ^ swizzle] = words.z;
        to[(word + 3) ^ swizzle] = words.w;
    }
}

// A convolution's producer warpgroup (CONV above): per stage, thread 0 has the TMA copy the
// filter tile and all 128 threads gather the activation tile.
template <int STAGES, int ROWS, int COLS, typename Shared, typename Sched>
__device__ __forceinline__ void gather_activations(Shared& sm, const Sched& schedule, const Window& win, const signed char* x, const TensorMap& w_map,
                                                   int rows, int depth_steps, int depth) {
    constexpr int ROWS_A_THREAD = ROWS / 16;
    const int tid = threadIdx.x, piece = tid % 8;
    const int h = (int)win.h, w = (int)win.w, c = (int)win.c, s_taps = (int)win.kw, ow = (int)win.ow, oh = (int)win.oh, plane = (int)(win.oh * win.ow);
    // This thread's rows of the tile (tid / 8 + 16 j): per row, the byte offset of its window's
    // top left corner (padding included) and that corner's row and column as one word's signed
    // half-words (past the pixels: a row no tap is in; the host keeps sizes below 2^15), which
    // leaves 256-row tiles' producer without spills.
    i64 corner[ROWS_A_THREAD];
    int corner_at[ROWS_A_THREAD];
    RingSlot<STAGES> slot(0);
    for (int seq = 0; seq < schedule.count; ++seq) {
        const int m0 = schedule.m(seq) * ROWS, n0 = schedule.n(seq) * COLS;
        // The first row's pixel by two divisions, each next one 16 pixels on by a walk (a row of
        // at least 16 pixels wraps at most once): two divisions a row were most of a tile's setup,
        // which delays the tile's first stages.
        int m = m0 + tid / 8, img = m / plane, oy = (m - img * plane) / ow, ox = m - img * plane - oy * ow;
#pragma unroll
        for (int j = 0; j < ROWS_A_THREAD; ++j) {
            if (j > 0) {
                m += 16;
                for (ox += 16; ox >= ow; ox -= ow)
                    if (++oy == oh) oy = 0, ++img;
            }
            const int top = oy * (int)win.sh - (int)win.ph, left = ox * (int)win.sw - (int)win.pw;
            corner_at[j] = (int)(((unsigned)(m < rows ? top : -(1 << 14)) << 16) | ((unsigned)left & 0xffffu));
            corner[j] = (((i64)img * h + top) * w + left) * c;
        }
        // The piece's tap (its row r and column q of the filter) and channel, walked 128 bytes of
        // depth a step without a division: channels are a multiple of 16, so a piece stays in
        // one tap.
        int d = piece * 16, channel = d, r = 0, q = 0;
        while (channel >= c) {
            channel -= c;
            if (++q == s_taps) q = 0, ++r;
        }
        for (int step = 0; step < depth_steps; ++step, slot.next()) {
            const unsigned s = slot.stage;
            barrier_wait(&sm.empty[s], slot.phase ^ 1);
            if (tid == 0) {
                barrier_expect_bytes(&sm.full[s], COLS * IG_BK);
                tma_load_2d(sm.stages[s] + IG_A_BYTES(ROWS / IG_BM), &w_map, step * IG_BK, n0, &sm.full[s]);
            }
            // The tap's offset from a window's corner, the same for every row.
            const int dy = r * (int)win.dh, dx = q * (int)win.dw;
            const i64 offset = ((i64)dy * w + dx) * c + channel;
            const unsigned stage = shared_address(sm.stages[s]);
#pragma unroll
            for (int j = 0; j < ROWS_A_THREAD; ++j) {
                const int row = tid / 8 + 16 * j;
                const int top = corner_at[j] >> 16, left = (short)(corner_at[j] & 0xffff);
                const bool valid = d < depth && (unsigned)(top + dy) < (unsigned)h && (unsigned)(left + dx) < (unsigned)w;
                cp_async16_to(stage + sw128_offset(row, piece), valid ? x + corner[j] + offset : x, valid);
            }
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&sm.full[s])) : "memory");
            d += IG_BK;
            channel += IG_BK;
            while (channel >= c) {
                channel -= c;
                if (++q == s_taps) q = 0, ++r;
            }
        }
    }
}

// Stage slot `pos` (counted over the block's tiles in order, `depth_steps` each) is stage
// pos % STAGES, on its barriers' phase pos / STAGES. A consumer's `loads`-th table copy
// completes phase `loads` of its table_full barrier; it releases the table (table_empty) after
// the last tile that reads it.
// JOIN: `then` is the join table (IG_JOIN_TABLE_BYTES), or with LINE the join's line (JoinLine's
// 8 words), `join` the join's bytes (the output's shape, rows of 16-byte pieces).
// CONV: a convolution of `win`'s geometry over the NHWC input `x` (rows: its output pixels,
// cols: filters, depth: r·s·c), `x_map` unused.
template <int STAGES, bool LOOKUP, int HALVES, int COLS = IG_BN, int CONSUMERS = 2, bool JOIN = false, bool CONV = false, bool COOP = false,
          bool LINE = false>
__device__ __forceinline__ void int8_gemm_tma(const TensorMap& x_map, const TensorMap& w_map, int rows, int cols, int depth, const int* int_bias,
                                              const float* scale, i64 scale_len, float y_zero, float lo, float hi, int relu,
                                              const unsigned char* then, const unsigned char* lookup, unsigned char* y,
                                              const unsigned char* join = nullptr, const Window* win = nullptr, const signed char* x = nullptr) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    static_assert(!LOOKUP || COLS == IG_BN, "a lookup's table is a 128-column tile's");
    static_assert(!JOIN || (!LOOKUP && HALVES == 1 && COLS == IG_BN), "a join's kernel: 64 × 128 tiles, no lookup");
    static_assert(!COOP || (!LOOKUP && !JOIN), "cooperative tiles: levels only");
    static_assert(!LINE || JOIN, "a line is a join's");
    // A join by table: the table at IG_JOIN_TABLE_AT; by line: no table.
    constexpr bool TABLE = JOIN && !LINE;
    // A stage's m64 blocks of rows: a consumer's HALVES, or every consumer's (COOP).
    constexpr int STAGE_HALVES = COOP ? HALVES * CONSUMERS : HALVES;
    static_assert((STAGES * IG_STAGE_BYTES(STAGE_HALVES, COLS) + CONSUMERS * IG_OUT_BYTES(COLS)) % 256 == 0, "tables start 256-aligned (looked_up_in_tile)");
    using Plain = GemmShared<STAGES, LOOKUP ? IG_TABLE_BYTES : 16, STAGE_HALVES, COLS, CONSUMERS>;
    using Shared = typename Either<TABLE, JoinShared<STAGES, CONSUMERS>, typename Either<LINE, JoinLineShared<STAGES, CONSUMERS>, Plain>::type>::type;
    constexpr int ROWS = IG_BM * STAGE_HALVES;
    extern __shared__ __align__(16) unsigned char dynamic_smem[];
    unsigned char* base = dynamic_smem + sw128_padding(shared_address(dynamic_smem));
    if constexpr (TABLE) {
        constexpr unsigned at = IG_JOIN_TABLE_AT - Shared::TABLE_OFFSET;
        if (shared_address(dynamic_smem) <= at) base = dynamic_smem + (at - shared_address(dynamic_smem));
    }
    Shared& sm = *reinterpret_cast<Shared*>(base);
    // Cannot happen on Hopper (1 KiB reserved below the dynamic shared memory): a table
    // elsewhere would be read at the wrong addresses, so the launch fails instead.
    if constexpr (TABLE)
        if (shared_address(sm.join_table) != IG_JOIN_TABLE_AT) __trap();
    const int tid = threadIdx.x, warpgroup = tid / 128;
    const Schedule<LOOKUP, ROWS, COLS, CONSUMERS> schedule(rows, cols);
    const int depth_steps = (depth + IG_BK - 1) / IG_BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            // The producer's arrival (and a gathering convolution's 128 threads' copies'); the
            // TMA's bytes complete it.
            barrier_init(&sm.full[s], CONV ? 129 : 1);
            barrier_init(&sm.empty[s], COOP ? 4 * CONSUMERS : 4);  // one lane of each of its consumers' four warps
        }
        for (int c = 0; c < CONSUMERS; ++c) {
            barrier_init(&sm.mainloop_done[c], 4);
            barrier_init(&sm.table_full[c], 1);
            barrier_init(&sm.table_empty[c], 4);
        }
        barrier_init_fence();
    }
    if constexpr (TABLE)
        copy_join_table(then, sm.join_table, tid, IG_THREADS(CONSUMERS));
    else if (!LINE && then)
        for (int i = tid; i < 256; i += IG_THREADS(CONSUMERS)) sm.then_levels[i] = then[i];
    __syncthreads();

    if (warpgroup == 0) {
        if constexpr (CONV) {
            gather_activations<STAGES, ROWS, COLS>(sm, schedule, *win, x, w_map, rows, depth_steps, depth);
            return;
        }
        if (tid != 0) return;
        RingSlot<STAGES> slot(0);
        int loads[CONSUMERS] = {};
        for (int seq = 0; seq < schedule.count; ++seq) {
            const int m0 = schedule.m(seq) * ROWS, n0 = schedule.n(seq) * COLS;
            const int c = seq % CONSUMERS;
            if (LOOKUP && schedule.new_table(seq)) {
                // The consumer's previous table is released (a fresh barrier passes parity 1).
                barrier_wait(&sm.table_empty[c], (loads[c] + 1) & 1);
                const unsigned bytes = (unsigned)min(IG_BN, cols - n0) * 256;
                barrier_expect_bytes(&sm.table_full[c], bytes);
                bulk_load(sm.tables[c], lookup + (i64)n0 * 256, bytes, &sm.table_full[c]);
                ++loads[c];
            }
            for (int step = 0; step < depth_steps; ++step, slot.next()) {
                const unsigned s = slot.stage;
                barrier_wait(&sm.empty[s], slot.phase ^ 1);
                barrier_expect_bytes(&sm.full[s], IG_STAGE_BYTES(STAGE_HALVES, COLS));
                tma_load_2d(sm.stages[s], &x_map, step * IG_BK, m0, &sm.full[s]);
                tma_load_2d(sm.stages[s] + IG_A_BYTES(STAGE_HALVES), &w_map, step * IG_BK, n0, &sm.full[s]);
            }
        }
        return;
    }

    // Broadcast, so that the compiler knows it is warp-uniform: the main loop's stage and descriptor
    // arithmetic then stays in uniform registers.
    const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0), thread = tid % 128, warp = thread / 32, lane = tid % 32;
    // The levels' bounds less the zero point (ReLU's floor included): level_of_sum's.
    const int zero = (int)y_zero, high = (int)hi, low = relu ? max((int)lo, zero) : (int)lo;
    const float low_f = (float)(low - zero), high_f = (float)(high - zero);
    const bool per_channel = scale_len != 1;
    unsigned char* out_tile = sm.out[consumer];
    const unsigned table_rows = shared_address(sm.tables[consumer]);
    unsigned join_table = 0;
    if constexpr (TABLE) join_table = shared_address(sm.join_table);
    JoinLine line{};
    if constexpr (LINE) line = join_line_of(reinterpret_cast<const int*>(then));
    // A warp's 16 rows of its consumer's join tile: 16-byte pieces (a table's), or rows
    // IG_LINE_PITCH apart (a line's).
    constexpr int JOIN_PITCH = LINE ? IG_LINE_PITCH : IG_BN;
    constexpr int COLUMNS_A_THREAD = (COLS + 127) / 128;
    // A warp's 16 rows of an m64 block leave in PIECES 16-byte pieces a lane: piece `lane + 32 i`
    // of the rows, row-major.
    constexpr int PIECES = 16 * COLS / 16 / 32;
    // A join: the join bytes of the lane's pieces of the consumer's tile `seq`, copied into its
    // join tile (cp.async) a tile ahead: the previous tile's lookups and stores, and this
    // one's wait for its turn and main loop, cover the copy.
    unsigned join_at = 0;
    auto copy_joins = [&](int seq) {
        if constexpr (JOIN) {
            const int m0 = schedule.m(seq) * ROWS, n0 = schedule.n(seq) * COLS;
            // The tile's corner in 64 bits once; a row within it in 32 (64 rows of cols bytes).
            const unsigned char* corner = join + (i64)m0 * cols + n0;
#pragma unroll
            for (int i = 0; i < PIECES; ++i) {
                const int piece = lane + 32 * i, row = 16 * warp + piece / (COLS / 16), col = piece % (COLS / 16) * 16;
                const bool in = m0 + row < rows && n0 + col < cols;
                cp_async16_to(join_at + (piece / (COLS / 16)) * JOIN_PITCH + col, in ? corner + row * cols + col : join, in);
            }
            cp_async_commit();
        }
    };
    if constexpr (JOIN) {
        join_at = shared_address(sm.join_tiles[consumer]) + 16 * JOIN_PITCH * warp;
        if (consumer < schedule.count) copy_joins(consumer);
    }
    int acc[HALVES][COLS / 2], loads = 0;
    const unsigned ring_low = wgmma_descriptor_low(sm.stages[0]);
    // COOP: every consumer takes every tile, its rows HALVES m64 blocks after the previous one's.
    constexpr int TILE_STRIDE = COOP ? 1 : CONSUMERS;
    const int first_half = COOP ? HALVES * consumer : 0;
    for (int seq = COOP ? 0 : consumer, tiles = 0; seq < schedule.count; seq += TILE_STRIDE, ++tiles) {
        const int m0 = schedule.m(seq) * ROWS, n0 = schedule.n(seq) * COLS;
        // This thread's columns of the tile: their scales, read now, staged after the main loop.
        float column_scale[COLUMNS_A_THREAD];
#pragma unroll
        for (int t = 0; t < COLUMNS_A_THREAD; ++t) {
            const int column = min(n0 + thread + 128 * t, cols - 1);
            column_scale[t] = scale[per_channel ? column : 0];
        }
        // The sums start at their columns' int32 biases (exact: the host's bound keeps bias plus
        // sum in int32): the epilogue adds none. Accumulator 4·j + i's column is
        // 8·j + 2·(lane % 4) + i % 2; columns come in even pairs (cols is a multiple of 16).
#pragma unroll
        for (int j = 0; j < COLS / 8; ++j) {
            const int column = min(n0 + 8 * j + 2 * (lane % 4), cols - 2);
            const int2 b = int_bias ? __ldg(reinterpret_cast<const int2*>(int_bias + column)) : make_int2(0, 0);
#pragma unroll
            for (int h = 0; h < HALVES; ++h) {
                acc[h][4 * j] = acc[h][4 * j + 2] = b.x;
                acc[h][4 * j + 1] = acc[h][4 * j + 3] = b.y;
            }
        }
        // Main loops take turns: this tile's starts once the previous tile's consumer has waited
        // for all its stages (its k-th tile, k = (seq - 1) / CONSUMERS, completes that phase). So
        // every slot before this tile's is filled and no wait below can mistake a stage's phase
        // two rounds back for its own; and one consumer's epilogue runs beside the others' MMAs.
        // Cooperating consumers read the same stages: no turns.
        if (!COOP && seq > 0) barrier_wait(&sm.mainloop_done[consumer == 0 ? CONSUMERS - 1 : consumer - 1], ((seq - 1) / CONSUMERS) & 1);
        RingSlot<STAGES> slot((unsigned)(seq * depth_steps));
        unsigned last = 0;  // the previous step's stage
        for (int step = 0; step < depth_steps; ++step) {
            barrier_wait(&sm.full[slot.stage], slot.phase);
            // A gathering convolution's activations were written by cp.async: visible to wgmma's
            // async proxy once the barrier has passed and this fence.
            if (CONV) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            const unsigned a = ring_low + slot.stage * (unsigned)(sizeof(sm.stages[0]) / 16), b = a + IG_A_BYTES(STAGE_HALVES) / 16;
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            // 32 bytes of depth a wgmma: 2 in the descriptors' 16-byte units, before the swizzle;
            // the next m64 block of rows IG_BM · IG_BK bytes on.
#pragma unroll
            for (int k = 0; k < IG_BK / 32; ++k)
#pragma unroll
                for (int h = 0; h < HALVES; ++h)
                    wgmma_s8<COLS>(acc[h], wgmma_sw128(a + (first_half + h) * (IG_BM * IG_BK / 16) + 2 * k, 8 * IG_BK), wgmma_sw128(b + 2 * k, 8 * IG_BK));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            // The previous step's MMAs are done (this one's run on): release its stage.
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (step > 0 && lane == 0) barrier_arrive(&sm.empty[last]);
            last = slot.stage;
            slot.next();
        }
        if (!COOP && lane == 0) barrier_arrive(&sm.mainloop_done[consumer]);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int h = 0; h < HALVES; ++h) wgmma_fence_operands<COLS / 2>(acc[h]);
        if (lane == 0) barrier_arrive(&sm.empty[last]);
        // Alternate buffers: a warp writes this tile's after every warp of the consumer has passed
        // the previous tile's barrier, so after every warp's epilogue of two tiles back.
        const float* scales = sm.column_scale[consumer][tiles & 1];
#pragma unroll
        for (int t = 0; t < COLUMNS_A_THREAD; ++t) {
            if (thread + 128 * t < COLS) {
                sm.column_scale[consumer][tiles & 1][thread + 128 * t] = column_scale[t];
            }
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + consumer) : "memory");

#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
            // Each warp gathers its 16 rows' levels in its rows of the output tile; a line's
            // second levels, from the join bytes its lanes copied (each lane reads others').
            if constexpr (LINE) {
                cp_async_wait<0>();
                __syncwarp();
                if (line.signed_join)
                    store_joined_levels<COLS, true>(acc[h], scales, join_at, line, shared_address(out_tile), warp, lane, low_f, high_f);
                else
                    store_joined_levels<COLS, false>(acc[h], scales, join_at, line, shared_address(out_tile), warp, lane, low_f, high_f);
            } else {
                store_levels<COLS>(acc[h], scales, then && !JOIN ? sm.then_levels : nullptr, out_tile, warp, lane, low_f, high_f, zero);
            }
            __syncwarp();
            if (LOOKUP && h == 0 && schedule.new_table(seq)) barrier_wait(&sm.table_full[consumer], loads++ & 1);
            // The warp's 16 rows leave in 16-byte pieces (cols is a multiple of 16: the host's
            // check), each level looked up in its column's row of the table where the layer has one.
            // Every piece is read (and looked up) before any is stored, so the pieces' shared
            // memory latencies overlap; only the stores check the tile's edges.
            uint4 pieces[PIECES], joins[TABLE ? PIECES : 1];
            if constexpr (TABLE) {
                cp_async_wait<0>();
#pragma unroll
                for (int i = 0; i < PIECES; ++i) joins[i] = *reinterpret_cast<const uint4*>(sm.join_tiles[consumer] + 2048 * warp + 16 * (lane + 32 * i));
            }
#pragma unroll
            for (int i = 0; i < PIECES; ++i) {
                const int piece = lane + 32 * i, row = 16 * warp + piece / (COLS / 16), col = piece % (COLS / 16) * 16;
                pieces[i] = *reinterpret_cast<const uint4*>(out_tile + row * IG_OUT_PITCH(COLS) + col);
            }
            // The join tile is free (a table's: each lane reads only the pieces it copied; a line's:
            // read before the warp's barrier above): the next one's copy.
            if (JOIN && seq + CONSUMERS < schedule.count) copy_joins(seq + CONSUMERS);
#pragma unroll
            for (int i = 0; i < PIECES; ++i) {
                const int col = (lane + 32 * i) % (COLS / 16) * 16;
                if (LOOKUP) pieces[i] = looked_up_in_tile(table_rows + col * 256, pieces[i]);
                if constexpr (TABLE) pieces[i] = joined_in_table(join_table, pieces[i], joins[i]);
            }
            // Rows within the tile are addressed in 32 bits from its corner (the host keeps 256
            // rows' bytes in int range): the 64-bit address arithmetic was a sixteenth of a join
            // tile's instructions.
#pragma unroll
            for (int i = 0; i < PIECES; ++i) {
                const int piece = lane + 32 * i, row = 16 * warp + piece / (COLS / 16), col = piece % (COLS / 16) * 16;
                const int tile_row = IG_BM * (first_half + h) + row;
                if (m0 + tile_row < rows && n0 + col < cols) *reinterpret_cast<uint4*>(y + ((i64)m0 * cols + n0) + (tile_row * cols + col)) = pieces[i];
            }
            __syncwarp();
        }
        // Done with the table: release it where this consumer's next tile needs other rows.
        const int next = seq + TILE_STRIDE;
        if (LOOKUP && next < schedule.count && schedule.new_table(next) && lane == 0)
            barrier_arrive(&sm.table_empty[consumer]);
    }
}

#define INT8_GEMM_PARAMS                                                                                                          \
    const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map, int rows, int cols, int depth,             \
        const int *int_bias, const float *scale, i64 scale_len, const float *float_bias, i64 float_bias_len, float y_scale,      \
        float y_zero, float lo, float hi, int relu, const void *residual, int residual_type, float residual_scale,               \
        float residual_zero, const unsigned char *then, const unsigned char *lookup, const void *join, const float *join_params, \
        int out_type, unsigned char *y

// Levels, or a second quantization's levels: 7 stages of 64 × 128 tiles, or 6 of 128 × 128 or 64 × 192.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_levels(INT8_GEMM_PARAMS) {
    int8_gemm_tma<7, false, 1, IG_BN, 3>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_levels_m128(INT8_GEMM_PARAMS) {
    int8_gemm_tma<6, false, 2>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_levels_n192(INT8_GEMM_PARAMS) {
    int8_gemm_tma<6, false, 1, 192>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y);
}

// Levels looked up in a per-column table: 4 stages beside the consumers' 32 KB tables.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_lookup(INT8_GEMM_PARAMS) {
    int8_gemm_tma<4, true, 1, IG_BN, 3>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, nullptr, lookup, y);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_lookup_m128(INT8_GEMM_PARAMS) {
    int8_gemm_tma<4, true, 2>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, nullptr, lookup, y);
}

// Convolutions: the levels of 64 × 128 tiles (7 stages) or 128 × 128 (6); `win` and `x` after
// the product's parameters.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_conv(INT8_GEMM_PARAMS, const Window win, const signed char* x) {
    int8_gemm_tma<7, false, 1, IG_BN, 3, false, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y,
                                                      nullptr, &win, x);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_conv_m128(INT8_GEMM_PARAMS, const Window win, const signed char* x) {
    int8_gemm_tma<6, false, 2, IG_BN, 2, false, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y,
                                                      nullptr, &win, x);
}

// 128 × 64 tiles (two m64 blocks by 64 filters, three consumers): layers of 64 filters, which a
// 128-column tile computes twice over; a product's and a convolution's.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_levels_n64(INT8_GEMM_PARAMS) {
    int8_gemm_tma<7, false, 2, 64, 3>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_conv_n64(INT8_GEMM_PARAMS, const Window win, const signed char* x) {
    int8_gemm_tma<7, false, 2, 64, 3, false, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y,
                                                   nullptr, &win, x);
}

// 256 × 128 tiles, both consumers on each (128 rows apiece, every stage's filter tile shared
// by 256 rows: a third fewer bytes from L2 a product than 128 × 128 tiles, whose consumers
// each load their own): a product's and a convolution's, 4 stages.
extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_levels_m256(INT8_GEMM_PARAMS) {
    int8_gemm_tma<4, false, 2, IG_BN, 2, false, false, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr,
                                                             y);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS(2), 1) int8_gemm_tma_conv_m256(INT8_GEMM_PARAMS, const Window win, const signed char* x) {
    int8_gemm_tma<4, false, 2, IG_BN, 2, false, true, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y,
                                                            nullptr, &win, x);
}

// A join's second levels looked up in the table the host passes in `then`'s place: 4 stages
// of 64 × 128 tiles beside it.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_join(INT8_GEMM_PARAMS) {
    int8_gemm_tma<4, false, 1, IG_BN, 3, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu, then, nullptr, y,
                                               static_cast<const unsigned char*>(join));
}

// A join's second levels on its line (the host's JoinLine words in `then`'s place): no table,
// so 6 stages.
extern "C" __global__ void __launch_bounds__(IG_THREADS(3), 1) int8_gemm_tma_join_line(INT8_GEMM_PARAMS) {
    int8_gemm_tma<6, false, 1, IG_BN, 3, true, false, false, true>(x_map, w_map, rows, cols, depth, int_bias, scale, scale_len, y_zero, lo, hi, relu,
                                                                   then, nullptr, y, static_cast<const unsigned char*>(join));
}
#endif
