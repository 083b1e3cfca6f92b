// TopK and running sums/products along one axis. Data is viewed as [outer, len, inner].
#include "common.cuh"

// Three-way order of two keys; NaN sorts above every number (numpy, as the cpu oracle).
template <typename T> __device__ __forceinline__ int order(T a, T b) { return a < b ? -1 : (b < a ? 1 : 0); }
__device__ __forceinline__ int order_float(double a, double b) {
    bool na = a != a, nb = b != b;
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
    return a < b ? -1 : (b < a ? 1 : 0);
}
template <> __device__ __forceinline__ int order(float a, float b) { return order_float(a, b); }
template <> __device__ __forceinline__ int order(double a, double b) { return order_float(a, b); }
template <> __device__ __forceinline__ int order(__half a, __half b) { return order_float(to_f(a), to_f(b)); }
template <> __device__ __forceinline__ int order(__nv_bfloat16 a, __nv_bfloat16 b) { return order_float(to_f(a), to_f(b)); }

// One thread per input element: its rank in its lane (elements that come before it: larger,
// or smaller when !largest, with ties going to the lower index) decides whether, and where,
// it lands among the k outputs. Output order is always sorted.
template <typename T>
__device__ void topk(i64 outer, i64 len, i64 inner, i64 k, int largest, const T* x, T* values, i64* indices) {
    i64 n = outer * len * inner;
    KILN_GRID_LOOP(i, n) {
        i64 c = i % inner;
        i64 e = (i / inner) % len;
        i64 o = i / (inner * len);
        const T* lane = x + o * len * inner + c;
        T v = lane[e * inner];
        i64 rank = 0;
        for (i64 j = 0; j < len && rank < k; ++j) {
            int ord = order(lane[j * inner], v);
            if (!largest) ord = -ord;
            rank += ord > 0 || (ord == 0 && j < e);
        }
        if (rank < k) {
            i64 at = (o * k + rank) * inner + c;
            values[at] = v;
            indices[at] = e;
        }
    }
}

// Running sums or products (exclusive: each output excludes its own element; reverse: from
// the lane's end). Floats accumulate in double; integers wrap as two's complement.
template <typename T> __device__ __forceinline__ double acc_load(T x) { return (double)to_f(x); }
template <> __device__ __forceinline__ double acc_load(double x) { return x; }
template <typename T> __device__ __forceinline__ T acc_store(double x) { return from_f<T>((float)x); }
template <> __device__ __forceinline__ double acc_store(double x) { return x; }

template <typename T, typename A, A (*LOAD)(T), T (*STORE)(A)>
__device__ void cumulative(i64 outer, i64 len, i64 inner, int exclusive, int reverse, int product, const T* x, T* out) {
    i64 lanes = outer * inner;
    KILN_GRID_LOOP(lane, lanes) {
        i64 c = lane % inner, o = lane / inner;
        i64 base = o * len * inner + c;
        A run = product ? (A)1 : (A)0;
        for (i64 step = 0; step < len; ++step) {
            i64 at = base + (reverse ? len - 1 - step : step) * inner;
            A v = LOAD(x[at]);
            A next = product ? run * v : run + v;
            out[at] = STORE(exclusive ? run : next);
            run = next;
        }
    }
}

template <typename T> __device__ u64 int_load(T x) { return (u64)(i64)x; }
template <typename T> __device__ T int_store(u64 x) { return (T)x; }

#define TOPK_KERNEL(suffix, T) \
    extern "C" __global__ void topk_##suffix(i64 outer, i64 len, i64 inner, i64 k, int largest, const T* x, T* v, i64* idx) { topk(outer, len, inner, k, largest, x, v, idx); }
#define CUM_FLOAT(suffix, T) \
    extern "C" __global__ void cumulative_##suffix(i64 outer, i64 len, i64 inner, int ex, int rev, int prod, const T* x, T* out) { \
        cumulative<T, double, acc_load<T>, acc_store<T>>(outer, len, inner, ex, rev, prod, x, out); }
#define CUM_INT(suffix, T) \
    extern "C" __global__ void cumulative_##suffix(i64 outer, i64 len, i64 inner, int ex, int rev, int prod, const T* x, T* out) { \
        cumulative<T, u64, int_load<T>, int_store<T>>(outer, len, inner, ex, rev, prod, x, out); }

#define NUMERIC(M_FLOAT, M_INT) \
    M_FLOAT(f32, float) M_FLOAT(f16, __half) M_FLOAT(bf16, __nv_bfloat16) M_FLOAT(f64, double) \
    M_INT(i8, signed char) M_INT(i16, short) M_INT(i32, int) M_INT(i64, i64) \
    M_INT(u8, unsigned char) M_INT(u16, unsigned short) M_INT(u32, unsigned int) M_INT(u64, u64)

NUMERIC(TOPK_KERNEL, TOPK_KERNEL)
NUMERIC(CUM_FLOAT, CUM_INT)
