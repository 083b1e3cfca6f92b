// Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier), for kiln's
// warp-specialized sm_90a kernels (int8_gemm.cu): a producer thread issues whole-tile copies
// that arrive on a barrier with their byte count; consumers wait on the barrier's phase and
// release the stage on a second barrier. Every function is inline, so only the kernels that
// use them assemble these instructions (sm_90 on).
#pragma once

// A tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned) as the host encoded it
// (cuTensorMapEncodeTiled), passed by value as a `const __grid_constant__` kernel parameter so
// the TMA unit reads it in place.
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// A barrier that completes a phase once `count` threads have arrived (and every expected byte
// has landed).
__device__ __forceinline__ void barrier_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// Arrives on `bar` and adds `bytes` to the bytes its phase waits for (the producer, before the
// copies that complete them).
__device__ __forceinline__ void barrier_expect_bytes(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// Waits until the barrier's phase of parity `parity` has completed. A fresh barrier is in phase
// 0, so waiting on parity 1 returns at once: a producer's first pass over a ring of free stages.
__device__ __forceinline__ void barrier_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(shared_address(bar)),
        "r"(parity)
        : "memory");
}

// The box of `map` at element coordinates (x innermost, y) into shared memory at `to` (aligned
// as the map's swizzle wants), completing `bytes` of `bar`'s phase. Elements outside the tensor
// arrive as zeros, and still count.
__device__ __forceinline__ void tma_load_2d(void* to, const TensorMap* map, int x, int y, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(shared_address(to)),
                 "l"((unsigned long long)map), "r"(x), "r"(y), "r"(shared_address(bar))
                 : "memory");
}

// `bytes` (a multiple of 16) from global `from` into shared memory at `to` (both 16-byte
// aligned) in one bulk copy, completing `bytes` of `bar`'s phase.
__device__ __forceinline__ void bulk_load(void* to, const void* from, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(shared_address(to)),
                 "l"((unsigned long long)from), "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}
