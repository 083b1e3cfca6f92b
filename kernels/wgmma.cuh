// Hopper's warpgroup MMA (wgmma) plumbing for kiln's sm_90a kernels (int8_conv.cu, int8_gemm.cu): shared-memory
// matrix descriptors and the asynchronous INT8 multiply. Every function is a template or inline,
// so only the kernels that use them assemble wgmma (it exists in sm_90a images only).
#pragma once

// The shared-memory matrix descriptor of a K-major tile, as its two words. The low one is the
// start address >> 4 and the leading byte offset 1 (unused by swizzled K-major layouts); any move
// within shared memory (< 256 KiB) changes it without a carry out of its 14-bit address field,
// so a main loop steps through a ring's stages and a stage's depth by 32-bit adds to it. The high
// one is a constant: the stride between 8-row groups >> 4 and the swizzle mode in bits 62-63.
// Whole 64-bit descriptors added and moved to uniform registers for each wgmma were two thirds of
// a main loop's instructions (SASS, session 59).
__device__ __forceinline__ unsigned wgmma_descriptor_low(const void* p) {
    return (((unsigned)__cvta_generic_to_shared(p) & 0x3FFFF) >> 4) | (1u << 16);
}

// Tiles of 128-byte rows with the 128-byte swizzle (wgmma_sw128's layout, the TMA's
// SWIZZLE_128B): 16-byte piece `piece` of row `row` lies at this byte offset, the pieces permuted
// by row % 8. The pattern repeats every 8 rows, so a tile starts 1024-aligned (sw128_padding).
__device__ __forceinline__ int sw128_offset(int row, int piece) { return row * 128 + (piece ^ (row % 8)) * 16; }

// The bytes from shared address `at` to the first where a 128-byte-swizzled tile may start.
__device__ __forceinline__ unsigned sw128_padding(unsigned at) { return (1024 - at % 1024) % 1024; }

// The 64-byte swizzle (mode 2).
__device__ __forceinline__ unsigned long long wgmma_descriptor_sw64(const void* p, unsigned group_stride_bytes) {
    return ((unsigned long long)((group_stride_bytes >> 4) | (2u << 30)) << 32) | wgmma_descriptor_low(p);
}

// The 128-byte swizzle (mode 1), the TMA's SWIZZLE_128B: rows of 128 bytes whose 16-byte pieces
// are permuted by row % 8, 8-row groups `group_stride_bytes` apart (1024 packed), from the low word.
__device__ __forceinline__ unsigned long long wgmma_sw128(unsigned low, unsigned group_stride_bytes) {
    return ((unsigned long long)((group_stride_bytes >> 4) | (1u << 30)) << 32) | low;
}

// The 32 accumulator operands d[o] … d[o + 31] of a wgmma's inline assembly, in order.
#define KILN_WGMMA_D32(d, o)                                                                                         \
    "+r"(d[o + 0]), "+r"(d[o + 1]), "+r"(d[o + 2]), "+r"(d[o + 3]), "+r"(d[o + 4]), "+r"(d[o + 5]), "+r"(d[o + 6]),   \
        "+r"(d[o + 7]), "+r"(d[o + 8]), "+r"(d[o + 9]), "+r"(d[o + 10]), "+r"(d[o + 11]), "+r"(d[o + 12]),            \
        "+r"(d[o + 13]), "+r"(d[o + 14]), "+r"(d[o + 15]), "+r"(d[o + 16]), "+r"(d[o + 17]), "+r"(d[o + 18]),         \
        "+r"(d[o + 19]), "+r"(d[o + 20]), "+r"(d[o + 21]), "+r"(d[o + 22]), "+r"(d[o + 23]), "+r"(d[o + 24]),         \
        "+r"(d[o + 25]), "+r"(d[o + 26]), "+r"(d[o + 27]), "+r"(d[o + 28]), "+r"(d[o + 29]), "+r"(d[o + 30]),         \
        "+r"(d[o + 31])

// One warpgroup's D[64][BN] += A[64][32] · B[BN][32]ᵀ (int8 × int8 → int32), both operands in
// shared memory. d is the warpgroup's accumulator fragment: mma.sync's m16n8 layout per 8
// columns over the warp's 16 rows.
template <int BN> __device__ __forceinline__ void wgmma_s8(int* d, unsigned long long a, unsigned long long b) {
    static_assert(BN == 64 || BN == 128 || BN == 192, "the shapes kiln uses");
    if constexpr (BN == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
            "}, %32, %33, p;\n}\n"
            : KILN_WGMMA_D32(d, 0)
            : "l"(a), "l"(b), "r"(1));
    } else if constexpr (BN == 192) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n192k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
            "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
            "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
            "}, %96, %97, p;\n}\n"
            : KILN_WGMMA_D32(d, 0), KILN_WGMMA_D32(d, 32), KILN_WGMMA_D32(d, 64)
            : "l"(a), "l"(b), "r"(1));
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
            "}, %64, %65, p;\n}\n"
            : KILN_WGMMA_D32(d, 0), KILN_WGMMA_D32(d, 32)
            : "l"(a), "l"(b), "r"(1));
    }
}

// One warpgroup's D[64][64] (+)= A[64][32] · B[64][32]ᵀ (int8 × int8 → int32) with A in registers:
// each warp's 16 rows as mma.sync m16n8k32's A fragment (a[0..3]), B in shared memory. D is
// overwritten where `accumulate` is 0 (the first depth step), so it needs no initial value.
__device__ __forceinline__ void wgmma_s8_rs_n64(int* d, const unsigned* a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p;\n}\n"
        : KILN_WGMMA_D32(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// Keeps the compiler from reading the accumulators before wgmma.wait_group has returned, or from
// reusing registers an MMA reads (its A fragment) before then.
template <int N, typename T> __device__ __forceinline__ void wgmma_fence_operands(T* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

