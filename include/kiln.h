/* kiln's C runtime API: libkiln_capi.so (cargo build -p kiln-capi; target/<profile>/libkiln_capi.so).
 *
 * Load an engine file (`kiln build`), create execution contexts on it, set inputs from host
 * memory, run, and copy the outputs back. Every call that can fail returns NULL or -1 and
 * leaves a message for kiln_last_error(); none aborts the program.
 *
 * Rules: free contexts before their engine; an engine may be shared by threads, a context
 * is used by one thread at a time. Names are the model's tensor names (UTF-8). Tensor data
 * is little-endian elements in C (row-major) order.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct KilnEngine KilnEngine;
typedef struct KilnContext KilnContext;

/* Element types (kiln_engine_io_dtype); -1 stands for a type not listed here. */
typedef enum KilnDataType {
    KILN_F32 = 0,
    KILN_F16 = 1,
    KILN_BF16 = 2,
    KILN_F64 = 3,
    KILN_I8 = 4,
    KILN_I16 = 5,
    KILN_I32 = 6,
    KILN_I64 = 7,
    KILN_U8 = 8,
    KILN_U16 = 9,
    KILN_U32 = 10,
    KILN_U64 = 11,
    KILN_BOOL = 12 /* one byte per element, 0 or 1 */
} KilnDataType;

/* kiln's version, e.g. "0.1.0" (static storage). */
const char *kiln_version(void);
/* The message of this thread's last failed call; valid until its next failed call. */
const char *kiln_last_error(void);

/* Loads an engine file and prepares it on the backend it was built for (cpu, wgpu, cuda). */
KilnEngine *kiln_engine_load(const char *path);
/* kiln_engine_load on device `device` (cuda's ordinal; backends with one device take only 0),
 * so one process may run engines on several GPUs. */
KilnEngine *kiln_engine_load_on_device(const char *path, int device);
void kiln_engine_free(KilnEngine *engine);
/* Inputs and outputs, inputs first: their count, and the name of one (owned by the engine). */
int kiln_engine_io_count(const KilnEngine *engine);
const char *kiln_engine_io_name(const KilnEngine *engine, int index);
/* 1 for an input, 0 for an output, -1 for no such name. */
int kiln_engine_is_input(const KilnEngine *engine, const char *name);
/* A KilnDataType, or -1. */
int kiln_engine_io_dtype(const KilnEngine *engine, const char *name);
/* Declared dims into dims[0..max_rank) (-1 for a dynamic dim); returns the rank, or -1. */
int kiln_engine_io_shape(const KilnEngine *engine, const char *name, int64_t *dims, int max_rank);

/* Optimization profiles of the engine (1 for fixed shapes), or -1. */
int kiln_engine_profile_count(const KilnEngine *engine);

/* A new context, profile 0 active. */
KilnContext *kiln_context_create(const KilnEngine *engine);
/* Makes profile `index` the context's (contexts of one engine may use different profiles at
 * once); inputs set before are dropped. 0, or -1. */
int kiln_context_set_profile(KilnContext *context, int index);
void kiln_context_free(KilnContext *context);
/* Sets an input to a copy of `bytes` bytes at `data`, in dims dims[0..rank). 0, or -1. */
int kiln_context_set_input(KilnContext *context, const char *name, const int64_t *dims, int rank,
                           const void *data, size_t bytes);
/* Runs the engine on the inputs set, synchronously. 0, or -1. */
int kiln_context_execute(KilnContext *context);
/* Dims of an output of the last run (host or device) into dims[0..max_rank); returns the
 * rank, or -1. */
int kiln_context_output_shape(const KilnContext *context, const char *name, int64_t *dims, int max_rank);
/* Copies an output of the last run into data (room for `bytes`); returns the bytes copied,
 * or -1 (also when the output does not fit). */
int64_t kiln_context_copy_output(const KilnContext *context, const char *name, void *data, size_t bytes);

/* Device-resident I/O (cuda engines): inputs read from and outputs written to device memory
 * the caller owns, ordered on the caller's CUDA stream, with no host copy. Engines on a
 * backend that runs on host memory (cpu, wgpu) refuse with a message. */

/* Sets the dims of input `name` for kiln_context_enqueue. 0, or -1. */
int kiln_context_set_input_shape(KilnContext *context, const char *name, const int64_t *dims, int rank);
/* Binds `bytes` bytes of device memory at `address` (a CUdeviceptr on the engine's device) to
 * input or output `name`. 0, or -1. */
int kiln_context_set_device_address(KilnContext *context, const char *name, uint64_t address, size_t bytes);
/* Runs on the bound device memory, ordered on `stream` (a CUstream; NULL: the legacy default
 * stream); records `input_consumed` (a CUevent, or NULL) once the inputs have been read, after
 * which they may be refilled. Returns once enqueued; the outputs are ready when the stream
 * reaches this point. 0, or -1. */
int kiln_context_enqueue(KilnContext *context, void *stream, void *input_consumed);
/* Gives device memory to an output whose size is known only once computed (data-dependent
 * shapes): called during kiln_context_enqueue with the output's name, dims and size; returns
 * a CUdeviceptr with room for `bytes` bytes, or 0 to refuse (the enqueue then fails). */
typedef uint64_t (*KilnOutputAllocator)(void *user, const char *name, const int64_t *dims, int rank, size_t bytes);
/* Makes output `name` take its device memory from `allocate` (with `user`) instead of an
 * address bound before. 0, or -1. */
int kiln_context_set_output_allocator(KilnContext *context, const char *name, KilnOutputAllocator allocate, void *user);
/* Page-locks `bytes` bytes of the caller's host memory at `data` for cuda device `device`:
 * bound with kiln_context_set_device_address, it is copied straight to and from the device
 * (one DMA, no staging copy). Keep it alive, and untouched while an execution uses it, until
 * kiln_unregister_host_memory(data). 0, or -1 (no CUDA, a range the driver refuses). */
int kiln_register_host_memory(void *data, size_t bytes, int device);
int kiln_unregister_host_memory(void *data);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
