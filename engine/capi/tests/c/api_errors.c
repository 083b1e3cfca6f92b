/* The C API's failures from C: each is a status or NULL with a message, never an abort.
 * Usage: api_errors ENGINE (an MNIST engine: input `data` f32[1,1,28,28], output `prob`).
 * Prints `ok` and exits 0 when every check holds; else names the first that does not. */
#include "check.h"

#include <math.h>

static uint64_t never_allocate(void *user, const char *name, const int64_t *dims, int rank, size_t bytes) {
    (void)user, (void)name, (void)dims, (void)rank, (void)bytes;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    check(kiln_engine_load("/nonexistent/kiln.engine") == NULL, "a missing file loads nothing");
    check(error_has("cannot read engine file"), "the message says the file cannot be read");
    check(kiln_engine_load(NULL) == NULL && error_has("the path is NULL"), "a NULL path is an error");
    check(kiln_engine_io_count(NULL) == -1 && error_has("the engine is NULL"), "a NULL engine is an error");

    check(kiln_engine_load_on_device(argv[1], 1) == NULL && error_has("there is no device 1"), "a cpu engine has one device");
    check(kiln_engine_load_on_device(argv[1], -1) == NULL && error_has("device -1 is negative"), "a negative device");
    KilnEngine *engine = kiln_engine_load(argv[1]);
    check(engine != NULL, "the engine loads");
    if (engine == NULL) return 1;
    check(kiln_engine_io_count(engine) == 2, "one input and one output");
    check(strcmp(kiln_engine_io_name(engine, 0), "data") == 0, "inputs come first");
    check(kiln_engine_io_name(engine, 7) == NULL && error_has("index 7"), "an index past the end is an error");
    check(kiln_engine_is_input(engine, "data") == 1 && kiln_engine_is_input(engine, "prob") == 0, "input and output");
    check(kiln_engine_is_input(engine, "nope") == -1 && error_has("no input or output named `nope`"), "an unknown name");
    check(kiln_engine_io_dtype(engine, "data") == KILN_F32, "f32 input");
    int64_t dims[4] = {0, 0, 0, 0};
    check(kiln_engine_io_shape(engine, "data", dims, 4) == 4 && dims[2] == 28, "the input's dims");
    check(kiln_engine_io_shape(engine, "data", dims, 2) == -1 && error_has("max_rank is 2"), "too little room for dims");

    KilnContext *context = kiln_context_create(engine);
    check(context != NULL, "a context");
    float image[784];
    for (int i = 0; i < 784; ++i) image[i] = 0.5f;
    check(kiln_context_set_input(context, "data", dims, 4, image, 40) == -1 && error_has("takes 3136"),
          "a short input is refused with the sizes");
    check(kiln_context_set_input(context, "prob", dims, 4, image, 3136) == -1 && error_has("not an input"),
          "an output is not an input");
    check(kiln_context_execute(context) == -1 && error_has("data"), "running without inputs names the missing one");
    check(kiln_context_copy_output(context, "prob", image, 40) == -1 && error_has("execute first"), "no outputs before a run");
    check(kiln_context_set_input(context, "data", dims, 4, image, sizeof image) == 0, "the input is set");
    check(kiln_context_execute(context) == 0, "the run succeeds");
    float prob[10];
    check(kiln_context_copy_output(context, "prob", prob, 8) == -1 && error_has("the buffer has 8"), "a short output buffer");
    check(kiln_context_copy_output(context, "prob", prob, sizeof prob) == 40, "the output is copied");
    float sum = 0;
    for (int i = 0; i < 10; ++i) sum += prob[i];
    check(fabsf(sum - 1.0f) < 1e-5f, "softmax sums to 1");
    int64_t out_dims[2];
    check(kiln_context_output_shape(context, "prob", out_dims, 2) == 2 && out_dims[1] == 10, "the output's dims");

    /* Device-resident I/O on a cpu engine: each call checks what it can, then the cpu backend
     * refuses to run on device memory, by name. */
    check(kiln_context_set_input_shape(context, "data", dims, -1) == -1 && error_has("rank is negative"), "a negative rank");
    check(kiln_context_set_input_shape(context, "data", dims, 4) == 0, "the input's dims for a device run");
    check(kiln_context_set_device_address(context, "nope", 4096, 16) == -1 && error_has("`nope`"), "device memory for an unknown name");
    check(kiln_context_enqueue(context, NULL, NULL) == -1 && error_has("no device memory is bound to `data`"), "nothing bound");
    check(kiln_context_set_device_address(context, "data", 4096, 3136) == 0, "device memory bound to the input");
    check(kiln_context_set_device_address(context, "prob", 8192, 8) == 0, "device memory bound to the output");
    check(kiln_context_enqueue(context, NULL, NULL) == -1 && error_has("the buffer of `prob` has 8 bytes, it needs 40"), "a short output");
    check(kiln_context_set_device_address(context, "prob", 8192, 40) == 0, "room for the output");
    check(kiln_context_enqueue(context, NULL, NULL) == -1 && error_has("backend `cpu` cannot run on device memory"),
          "a cpu engine refuses device memory by name");
    check(kiln_context_enqueue(NULL, NULL, NULL) == -1 && error_has("the context is NULL"), "a NULL context");
    check(kiln_context_set_output_allocator(context, "data", never_allocate, NULL) == -1 && error_has("`data` is an input"),
          "inputs take no output allocator");
    check(kiln_context_set_output_allocator(context, "prob", NULL, NULL) == -1 && error_has("allocator function is NULL"),
          "a NULL allocator");
    check(kiln_context_set_output_allocator(context, "prob", never_allocate, NULL) == 0, "an output allocator");
    check(kiln_context_enqueue(context, NULL, NULL) == -1 && error_has("backend `cpu` cannot run on device memory"),
          "still refused by the cpu backend");
    check(kiln_register_host_memory(NULL, 16, 0) == -1 && error_has("data is NULL"), "registering NULL");
    int pinned = kiln_register_host_memory(image, sizeof image, 0);
    check(pinned == 0 ? kiln_unregister_host_memory(image) == 0 : strlen(kiln_last_error()) > 0,
          "registration works with CUDA and fails with a message without");
    check(kiln_unregister_host_memory(image) == -1 && error_has("is not registered"), "unregistering what is not registered");
    kiln_context_free(context);
    kiln_engine_free(engine);
    kiln_engine_free(NULL);
    kiln_context_free(NULL);
    if (failures == 0) printf("ok\n");
    return failures == 0 ? 0 : 1;
}
