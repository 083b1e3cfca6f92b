/*
 * An example third-party kiln plugin in plain C99: `kiln.examples::ClipC@1`,
 * y = min(max(x, lo), hi), with a cpu implementation, a WGSL kernel and a CUDA kernel given
 * as CUDA C++ source for NVRTC. Build it with
 *     cc -std=c99 -shared -fPIC -I plugins/abi/include clip.c -o libclip.so
 * Fields: lo, hi (f32, defaults 0 and 6: ReLU6) and fail_enqueue (i32, a test hook: 1
 * makes enqueue_cpu return an error). The WGSL kernel sees one 32-bit word per element (kiln's
 * wgpu storage), here f32. The KILN_TEST_* macros build the misbehaving
 * variants kiln's bad-plugin tests need; a plugin author leaves them undefined.
 */
#include "kiln_plugin.h"

#include <stdlib.h>
#include <string.h>

typedef struct clip {
  float lo, hi;
  int32_t fail_enqueue;
  char wgsl[1024];
  char cuda[512];
} clip;

static kiln_status num_outputs(void* self, int32_t* count, kiln_error* err) {
  (void)self; (void)err;
  *count = 1;
  return KILN_OK;
}

static kiln_status output_types(void* self, const int32_t* in, int32_t n, int32_t* out, kiln_error* err) {
  (void)self;
  if (n != 1 || in[0] != KILN_F32) return kiln_set_error(err, "ClipC takes one f32 input (got %d inputs)", (int)n);
  out[0] = KILN_F32;
  return KILN_OK;
}

static kiln_status output_shapes(void* self, const int32_t* ranks, int32_t n, kiln_shape_exprs* out, kiln_error* err) {
  (void)self;
  if (n != 1) return kiln_set_error(err, "ClipC takes one input");
  if (ranks[0] > out->node_capacity || ranks[0] > KILN_MAX_RANK) return kiln_set_error(err, "rank too large");
  for (int32_t d = 0; d < ranks[0]; ++d) {
#ifdef KILN_TEST_BAD_SHAPES
    kiln_dim_expr e = {KILN_DIM_INPUT, 3, d, 0}; /* a test hook: refers to an input that does not exist */
#else
    kiln_dim_expr e = {KILN_DIM_INPUT, 0, d, 0};
#endif
    out->nodes[d] = e;
    out->output_dims[d] = d;
  }
  out->node_count = ranks[0];
  out->output_ranks[0] = ranks[0];
  return KILN_OK;
}

static kiln_status serialize(void* self, const kiln_field_sink* sink, kiln_error* err) {
  clip* c = (clip*)self;
  (void)err;
  kiln_field lo = {"lo", KILN_FIELD_F32, 1, &c->lo};
  kiln_field hi = {"hi", KILN_FIELD_F32, 1, &c->hi};
  sink->add(sink->host, &lo);
  sink->add(sink->host, &hi);
  if (c->fail_enqueue) {
    kiln_field fail = {"fail_enqueue", KILN_FIELD_I32, 1, &c->fail_enqueue};
    sink->add(sink->host, &fail);
  }
  return KILN_OK;
}

static int64_t volume(const kiln_tensor_desc* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d->rank; ++i) n *= d->dims[i];
  return n;
}

static kiln_status enqueue_cpu(void* self, uint32_t tactic, const kiln_tensor_desc* io, int32_t ni, int32_t no,
                               const void* const* inputs, void* const* outputs, void* workspace, kiln_error* err) {
  clip* c = (clip*)self;
  (void)tactic; (void)workspace;
  if (c->fail_enqueue) return kiln_set_error(err, "ClipC refuses to run (fail_enqueue is set)");
  if (ni != 1 || no != 1) return kiln_set_error(err, "ClipC has one input and one output");
  const float* x = (const float*)inputs[0];
  float* y = (float*)outputs[0];
  for (int64_t i = 0, n = volume(&io[1]); i < n; ++i) y[i] = x[i] < c->lo ? c->lo : (x[i] > c->hi ? c->hi : x[i]);
  return KILN_OK;
}

static kiln_status wgsl_kernel(void* self, const kiln_tensor_desc* io, int32_t ni, int32_t no, kiln_wgsl_kernel* out,
                               kiln_error* err) {
  clip* c = (clip*)self;
  (void)ni; (void)no; (void)err;
#ifdef KILN_TEST_BAD_WGSL
  snprintf(c->wgsl, sizeof c->wgsl, "fn clip( { this is not WGSL }"); /* a test hook: a kernel that fails to compile */
#else
  snprintf(c->wgsl, sizeof c->wgsl,
           "@group(0) @binding(0) var<storage, read> x: array<f32>;\n"
           "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
           "@compute @workgroup_size(256)\n"
           "fn clip(@builtin(global_invocation_id) id: vec3<u32>) {\n"
           "  if (id.x < arrayLength(&y)) { y[id.x] = clamp(x[id.x], %.9g, %.9g); }\n"
           "}\n", c->lo, c->hi);
#endif
  out->source = c->wgsl;
  out->entry_point = "clip";
  out->workgroups[0] = (uint32_t)((volume(&io[1]) + 255) / 256);
  out->workgroups[1] = 1;
  out->workgroups[2] = 1;
  return KILN_OK;
}

static kiln_status cuda_kernel(void* self, const kiln_tensor_desc* io, int32_t ni, int32_t no, kiln_cuda_kernel* out,
                               kiln_error* err) {
  clip* c = (clip*)self;
  (void)ni; (void)no; (void)err;
  snprintf(c->cuda, sizeof c->cuda,
           "extern \"C\" __global__ void clip(const float* x, float* y, unsigned long long n) {\n"
           "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
           "  if (i < n) y[i] = fminf(fmaxf(x[i], (float)(%.9g)), (float)(%.9g));\n"
           "}\n", c->lo, c->hi);
  out->image_kind = KILN_CUDA_SOURCE;
  out->image = c->cuda;
  out->image_size = strlen(c->cuda);
  out->entry_point = "clip";
  out->grid[0] = (uint32_t)((volume(&io[1]) + 255) / 256);
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = 256;
  out->block[1] = out->block[2] = 1;
  out->shared_memory_bytes = 0;
  return KILN_OK;
}

static void destroy(void* self) { free(self); }

static int find_f32(const kiln_field* fields, int32_t n, const char* name, float* value) {
  for (int32_t i = 0; i < n; ++i)
    if (strcmp(fields[i].name, name) == 0 && fields[i].length == 1) {
      if (fields[i].type == KILN_FIELD_F32) { *value = *(const float*)fields[i].data; return 1; }
      if (fields[i].type == KILN_FIELD_F64) { *value = (float)*(const double*)fields[i].data; return 1; }
    }
  return 0;
}

static kiln_status create(void* creator, const kiln_field* fields, int32_t n, kiln_plugin* out, kiln_error* err) {
  (void)creator;
  clip* c = (clip*)calloc(1, sizeof(clip));
  if (c == NULL) return kiln_set_error(err, "out of memory");
  c->lo = 0.0f;
  c->hi = 6.0f;
  find_f32(fields, n, "lo", &c->lo);
  find_f32(fields, n, "hi", &c->hi);
  for (int32_t i = 0; i < n; ++i)
    if (strcmp(fields[i].name, "fail_enqueue") == 0 && fields[i].type == KILN_FIELD_I32 && fields[i].length == 1)
      c->fail_enqueue = *(const int32_t*)fields[i].data;
  if (c->lo > c->hi) {
    float lo = c->lo, hi = c->hi;
    free(c);
    return kiln_set_error(err, "lo (%g) is above hi (%g)", lo, hi);
  }
  out->self = c;
  out->num_outputs = num_outputs;
  out->output_types = output_types;
  out->output_shapes = output_shapes;
  out->serialize = serialize;
  out->enqueue_cpu = enqueue_cpu;
#ifdef KILN_TEST_NO_WGSL /* a test hook: a plugin without a wgpu implementation */
  (void)wgsl_kernel;
#else
  out->wgsl_kernel = wgsl_kernel;
#endif
  out->cuda_kernel = cuda_kernel;
  out->destroy = destroy;
  return KILN_OK;
}

static const kiln_field_spec FIELDS[] = {{"lo", KILN_FIELD_F32}, {"hi", KILN_FIELD_F32}, {"fail_enqueue", KILN_FIELD_I32}};

/* The tests build variants under other namespaces; plugin authors just write their own. */
#ifndef KILN_TEST_NAMESPACE
#define KILN_TEST_NAMESPACE "kiln.examples"
#endif

static const kiln_plugin_creator CREATORS[] = {{
    KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator), "ClipC", "1", KILN_TEST_NAMESPACE, FIELDS, 3, NULL, create,
}};

static const kiln_plugin_library LIBRARY = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_library), "kiln-example-clip", 1, CREATORS};

#ifndef KILN_TEST_ABI_VERSION
#define KILN_TEST_ABI_VERSION KILN_PLUGIN_ABI_VERSION
#endif

const kiln_plugin_library* kiln_plugin_library_v1(void) {
  /* KILN_TEST_ABI_VERSION lets the tests build a library claiming another ABI version. */
  static kiln_plugin_library lib;
  lib = LIBRARY;
  lib.abi_version = KILN_TEST_ABI_VERSION;
  return &lib;
}
