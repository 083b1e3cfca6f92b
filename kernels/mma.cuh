// Tensor-core plumbing shared by kiln's mma.sync kernels (attention.cu, int8_conv.cu,
// int8_few_channels.cu): the int8 MMA, ldmatrix operand loads and cp.async copies from global
// to shared memory.
#pragma once

// c += a · b over 16 rows × 8 columns × 32 of depth, s8 × s8 → s32 (a: 4 words of the row-major
// A fragment, b0 / b1: the column-major B fragment's two words).
__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(const void* p, unsigned* r) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// The same from a shared-space address (`__cvta_generic_to_shared`'s).
__device__ __forceinline__ void ldmatrix_x4_to(unsigned a, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(const void* p, unsigned* r) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// A 16-byte copy from global memory to a shared-space address (`__cvta_generic_to_shared`'s)
// that does not pass through registers (cp.async), zeros where `valid` is false; the tile is
// ready once its group is waited for.
__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// The same, to a generic pointer into shared memory.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    cp_async16_to((unsigned)__cvta_generic_to_shared(dst), src, valid);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits for every committed group but the `N` most recent.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
