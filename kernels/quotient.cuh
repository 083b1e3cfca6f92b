// Division by a divisor fixed for a kernel's run, without the division (a 32-bit division is
// about 20 instructions, a 64-bit one about 80).
#pragma once

// n / d for n < 2^31 by a multiply-high and a shift (Granlund and Montgomery's rounded-up
// reciprocal; n < 2^31 keeps the sum in 32 bits). 0 < d < 2^31.
struct Quotient {
    unsigned magic, shift;
    __device__ explicit Quotient(unsigned d) {
        shift = 0;
        while ((1u << shift) < d) ++shift;
        magic = (unsigned)(((1ull << 32) * ((1ull << shift) - d)) / d + 1);
    }
    __device__ __forceinline__ unsigned of(unsigned n) const { return (__umulhi(n, magic) + n) >> shift; }
};
