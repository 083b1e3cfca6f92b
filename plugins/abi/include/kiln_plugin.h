/*
 * kiln_plugin.h — the C ABI between kiln and plugin libraries (ABI version 1).
 *
 * A plugin library exports one function, `kiln_plugin_library_v1`, returning a static
 * description of its plugin creators. Rules of the boundary:
 *   - Every struct kiln and a plugin exchange begins with `abi_version` and `struct_size`
 *     and only ever grows at its end; a reader uses a field only when `struct_size` covers it.
 *   - No ownership crosses: strings and arrays a plugin returns stay owned by the plugin and
 *     valid until the next call on the same object (or for the library's lifetime when they
 *     are static); kiln copies what it keeps. Buffers kiln passes stay kiln's.
 *   - Every entry returns a kiln_status (KILN_OK or an error code) and, on error, writes a
 *     message into the kiln_error the caller passed (kiln_set_error does it safely).
 *   - Nothing unwinds across the boundary: C++ exceptions and Rust panics must be caught.
 *   - kiln may call an instance from any thread, but never from two at once; creators and
 *     the library description may be called from several threads at once.
 * The layer interface follows TensorRT's IPluginV3: core (outputs), build (formats,
 * configuration, workspace, tactics, timing-cache id) and runtime (per-backend execution,
 * serialization) capabilities.
 */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_ABI_VERSION 1u
#define KILN_MAX_RANK 8
#define KILN_ENTRY_POINT "kiln_plugin_library_v1"

typedef int32_t kiln_status;
#define KILN_OK 0
#define KILN_ERROR 1
#define KILN_UNSUPPORTED 2

/* Element types: ONNX TensorProto codes. */
typedef enum kiln_dtype {
  KILN_F32 = 1, KILN_U8 = 2, KILN_I8 = 3, KILN_U16 = 4, KILN_I16 = 5, KILN_I32 = 6,
  KILN_I64 = 7, KILN_BOOL = 9, KILN_F16 = 10, KILN_F64 = 11, KILN_U32 = 12, KILN_U64 = 13,
  KILN_BF16 = 16
} kiln_dtype;

/* Tensor formats (kiln's TensorFormat; LINEAR is row-major). */
typedef enum kiln_format { KILN_LINEAR = 0 } kiln_format;

/* An error message buffer owned by the caller. */
typedef struct kiln_error {
  char* message;     /* NUL-terminated on return */
  uint32_t capacity; /* bytes in message, terminator included */
} kiln_error;

static inline kiln_status kiln_set_error(kiln_error* err, const char* format, ...) {
  if (err != NULL && err->message != NULL && err->capacity > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(err->message, err->capacity, format, args);
    va_end(args);
  }
  return KILN_ERROR;
}

/* Plugin fields (TensorRT's PluginField). */
typedef enum kiln_field_type {
  KILN_FIELD_F32 = 0, KILN_FIELD_F64 = 1, KILN_FIELD_I32 = 2, KILN_FIELD_I64 = 3,
  KILN_FIELD_BYTES = 4, KILN_FIELD_TEXT = 5
} kiln_field_type;

typedef struct kiln_field {
  const char* name;
  int32_t type;        /* kiln_field_type */
  int64_t length;      /* elements (bytes for BYTES and TEXT, no terminator) */
  const void* data;
} kiln_field;

typedef struct kiln_field_spec {
  const char* name;
  int32_t type;        /* kiln_field_type */
} kiln_field_spec;

/* One input or output: dims[i] is -1 where unknown until run time. */
typedef struct kiln_tensor_desc {
  int32_t dtype;       /* kiln_dtype */
  int32_t format;      /* kiln_format */
  int32_t rank;
  int64_t dims[KILN_MAX_RANK];
} kiln_tensor_desc;

/* Output dims as expressions over input dims: a node list in which binary nodes refer to
 * earlier nodes; each output dim is a node index. */
typedef enum kiln_dim_op {
  KILN_DIM_CONST = 0,    /* value */
  KILN_DIM_INPUT = 1,    /* dim `b` of input `a` */
  KILN_DIM_ADD = 2, KILN_DIM_SUB = 3, KILN_DIM_MUL = 4, KILN_DIM_FLOOR_DIV = 5,
  KILN_DIM_CEIL_DIV = 6, KILN_DIM_MAX = 7, KILN_DIM_MIN = 8  /* nodes a and b */
} kiln_dim_op;

typedef struct kiln_dim_expr {
  int32_t op;          /* kiln_dim_op */
  int32_t a;
  int32_t b;
  int64_t value;
} kiln_dim_expr;

/* Filled by output_shapes; arrays owned by kiln, sized by the capacities. */
typedef struct kiln_shape_exprs {
  uint32_t struct_size;
  int32_t node_capacity;
  int32_t node_count;
  kiln_dim_expr* nodes;
  int32_t output_capacity;   /* the plugin's num_outputs */
  int32_t* output_ranks;     /* [output_capacity] */
  int32_t* output_dims;      /* [output_capacity * KILN_MAX_RANK], node indices */
} kiln_shape_exprs;

/* A WGSL kernel for the wgpu backend: @group(0) @binding(0..) are the inputs (declare them
 * var<storage, read>) then the outputs (var<storage, read_write>), every one of them used by
 * `entry_point`; dispatched over `workgroups`. The wgpu backend stores one 32-bit word per
 * element, so the kernel sees array<f32> for float tensors (f16/bf16 widened), array<i32> for
 * signed integers (i64 narrowed) and array<u32> for unsigned integers and bool (0/1); output
 * buffers arrive zeroed and hold at least one word (arrayLength may exceed an empty output). */
typedef struct kiln_wgsl_kernel {
  const char* source;
  const char* entry_point;
  uint32_t workgroups[3];
} kiln_wgsl_kernel;

/* A CUDA kernel for the cuda backend (PTX, CUBIN or CUDA C++ source, which kiln compiles with
 * NVRTC for the device's architecture; it may include the CUDA headers), launched on kiln's
 * stream with `grid`, `block` and `shared_memory_bytes` and the arguments: one device pointer
 * per input, then one per output, then the element count of the first output (uint64).
 * Tensors keep their native element types there (f16 is 2 bytes, i64 8). */
typedef enum kiln_cuda_image_kind { KILN_CUDA_PTX = 0, KILN_CUDA_CUBIN = 1, KILN_CUDA_SOURCE = 2 } kiln_cuda_image_kind;

typedef struct kiln_cuda_kernel {
  int32_t image_kind;  /* kiln_cuda_image_kind */
  const void* image;
  uint64_t image_size; /* bytes (no terminator for PTX and source) */
  const char* entry_point;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_memory_bytes;
} kiln_cuda_kernel;

/* kiln's receiver for serialized fields: `add` copies the field at once. */
typedef struct kiln_field_sink {
  void* host;
  void (*add)(void* host, const kiln_field* field);
} kiln_field_sink;

/* A plugin instance. Entries a plugin does not implement are NULL (the runtime entries
 * say which backends it runs on). */
typedef struct kiln_plugin {
  uint32_t abi_version;
  uint32_t struct_size;
  void* self;

  /* core */
  kiln_status (*num_outputs)(void* self, int32_t* count, kiln_error* err);
  kiln_status (*output_types)(void* self, const int32_t* input_types, int32_t num_inputs,
                              int32_t* output_types, kiln_error* err);
  kiln_status (*output_shapes)(void* self, const int32_t* input_ranks, int32_t num_inputs,
                               kiln_shape_exprs* out, kiln_error* err);

  /* build */
  kiln_status (*supports_format_combination)(void* self, int32_t pos, const kiln_tensor_desc* io,
                                             int32_t num_inputs, int32_t num_outputs,
                                             int32_t* supported, kiln_error* err);
  kiln_status (*configure)(void* self, const kiln_tensor_desc* io, int32_t num_inputs,
                           int32_t num_outputs, kiln_error* err);
  kiln_status (*workspace_size)(void* self, const kiln_tensor_desc* io, int32_t num_inputs,
                                int32_t num_outputs, uint64_t* bytes, kiln_error* err);
  kiln_status (*tactics)(void* self, uint32_t* tactics, int32_t capacity, int32_t* count,
                         kiln_error* err);
  kiln_status (*timing_cache_id)(void* self, char* id, uint32_t capacity, kiln_error* err);
  kiln_status (*serialize)(void* self, const kiln_field_sink* sink, kiln_error* err);

  /* runtime */
  kiln_status (*enqueue_cpu)(void* self, uint32_t tactic, const kiln_tensor_desc* io,
                             int32_t num_inputs, int32_t num_outputs, const void* const* inputs,
                             void* const* outputs, void* workspace, kiln_error* err);
  kiln_status (*wgsl_kernel)(void* self, const kiln_tensor_desc* io, int32_t num_inputs,
                             int32_t num_outputs, kiln_wgsl_kernel* out, kiln_error* err);
  kiln_status (*cuda_kernel)(void* self, const kiln_tensor_desc* io, int32_t num_inputs,
                             int32_t num_outputs, kiln_cuda_kernel* out, kiln_error* err);
  /* Runs on the caller's CUDA stream (a CUstream) with device pointers. */
  kiln_status (*enqueue_cuda)(void* self, uint32_t tactic, const kiln_tensor_desc* io,
                              int32_t num_inputs, int32_t num_outputs, const void* const* inputs,
                              void* const* outputs, void* workspace, void* stream, kiln_error* err);

  void (*destroy)(void* self);
} kiln_plugin;

/* Makes plugin instances (TensorRT's IPluginCreatorV3One). */
typedef struct kiln_plugin_creator {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* plugin_namespace;
  const kiln_field_spec* fields;
  int32_t field_count;
  void* self;
  /* Fills `out` (whose abi_version and struct_size kiln has set) from the fields. */
  kiln_status (*create)(void* self, const kiln_field* fields, int32_t field_count,
                        kiln_plugin* out, kiln_error* err);
} kiln_plugin_creator;

/* What `kiln_plugin_library_v1` returns: static for the library's lifetime. */
typedef struct kiln_plugin_library {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* library_name;
  int32_t creator_count;
  const kiln_plugin_creator* creators;
} kiln_plugin_library;

typedef const kiln_plugin_library* (*kiln_plugin_library_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_PLUGIN_H */
