// Runs a cuda engine from C++ with device-resident I/O through include/kiln.h: inputs are
// copied once into device memory the program allocates, the engine reads them there and
// writes its outputs into device memory that an output allocator callback hands out, on the
// program's own CUDA stream; the outputs are copied back and printed as run_engine.cpp prints
// them (same fill pattern, f32 only), so the two programs' outputs can be compared.
//
// The CUDA driver is opened with dlopen (no CUDA headers or libraries are needed to build):
//   c++ -std=c++17 -I include examples/c/run_engine_device.cpp -L target/debug -lkiln_capi
//       -ldl -Wl,-rpath,target/debug -o run_engine_device
//   ./run_engine_device model.engine
// Without a CUDA driver it says so and exits 3.

#include "example_io.hpp"

#include <dlfcn.h>

#include <map>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUdevice = int;
using CUcontext = void *;
using CUstream = void *;

// The few driver calls the example needs, looked up once.
struct Driver {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);

    bool load() {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (lib == nullptr) return false;
        auto sym = [lib](const char *name, auto &f) {
            f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
            return f != nullptr;
        };
        return sym("cuInit", init) && sym("cuDeviceGet", device_get) &&
               sym("cuDevicePrimaryCtxRetain", primary_ctx_retain) && sym("cuCtxSetCurrent", ctx_set_current) &&
               sym("cuStreamCreate", stream_create) && sym("cuStreamSynchronize", stream_synchronize) &&
               sym("cuMemAlloc_v2", mem_alloc) && sym("cuMemFree_v2", mem_free) && sym("cuMemcpyHtoD_v2", htod) &&
               sym("cuMemcpyDtoH_v2", dtoh);
    }
};

Driver cuda;

// Device memory the output allocator handed out, by output name (freed at exit).
std::map<std::string, CUdeviceptr> allocated;

uint64_t allocate_output(void *, const char *name, const int64_t *, int, size_t bytes) {
    CUdeviceptr ptr = 0;
    if (cuda.mem_alloc(&ptr, bytes > 0 ? bytes : 1) != 0) return 0;
    auto &slot = allocated[name];
    if (slot != 0) cuda.mem_free(slot);
    slot = ptr;
    return ptr;
}

int cuda_fail(const char *what, CUresult r) {
    std::fprintf(stderr, "error: %s failed (CUDA error %d)\n", what, r);
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s ENGINE\n", argv[0]);
        return 2;
    }
    if (!cuda.load()) {
        std::fprintf(stderr, "no CUDA driver (libcuda.so.1): device-resident I/O needs one\n");
        return 3;
    }
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
    CUresult r;
    if ((r = cuda.init(0)) != 0) return cuda_fail("cuInit", r);
    if ((r = cuda.device_get(&device, 0)) != 0) return cuda_fail("cuDeviceGet", r);
    // The primary context: the one kiln (and PyTorch) use, so addresses and streams are shared.
    if ((r = cuda.primary_ctx_retain(&ctx, device)) != 0) return cuda_fail("cuDevicePrimaryCtxRetain", r);
    if ((r = cuda.ctx_set_current(ctx)) != 0) return cuda_fail("cuCtxSetCurrent", r);
    if ((r = cuda.stream_create(&stream, 0)) != 0) return cuda_fail("cuStreamCreate", r);

    std::unique_ptr<KilnEngine, EngineFree> engine(kiln_engine_load(argv[1]));
    if (!engine) return fail("load");
    std::unique_ptr<KilnContext, ContextFree> context(kiln_context_create(engine.get()));
    if (!context) return fail("context");

    const int count = kiln_engine_io_count(engine.get());
    std::vector<std::string> outputs;
    std::vector<CUdeviceptr> inputs;
    for (int i = 0; i < count; ++i) {
        const std::string name = kiln_engine_io_name(engine.get(), i);
        if (kiln_engine_is_input(engine.get(), name.c_str()) == 0) {
            outputs.push_back(name);
            if (kiln_context_set_output_allocator(context.get(), name.c_str(), allocate_output, nullptr) != 0)
                return fail("output allocator");
            continue;
        }
        int64_t dims[8];
        int rank = 0;
        std::vector<float> values;
        if (!pattern_input(engine.get(), name, dims, rank, values)) return 1;
        const size_t bytes = values.size() * sizeof(float);
        CUdeviceptr ptr = 0;
        if ((r = cuda.mem_alloc(&ptr, bytes)) != 0) return cuda_fail("cuMemAlloc", r);
        inputs.push_back(ptr);
        if ((r = cuda.htod(ptr, values.data(), bytes)) != 0) return cuda_fail("cuMemcpyHtoD", r);
        if (kiln_context_set_input_shape(context.get(), name.c_str(), dims, rank) != 0) return fail("input shape");
        if (kiln_context_set_device_address(context.get(), name.c_str(), ptr, bytes) != 0) return fail("bind input");
    }
    if (kiln_context_enqueue(context.get(), stream, nullptr) != 0) return fail("enqueue");
    if ((r = cuda.stream_synchronize(stream)) != 0) return cuda_fail("cuStreamSynchronize", r);

    for (const std::string &name : outputs) {
        int64_t dims[8];
        int rank = 0;
        const long long elements = output_dims(context.get(), name, dims, rank);
        if (elements < 0) return 1;
        std::vector<float> values(static_cast<size_t>(elements));
        if ((r = cuda.dtoh(values.data(), allocated[name], values.size() * sizeof(float))) != 0)
            return cuda_fail("cuMemcpyDtoH", r);
        print_output(name, dims, rank, values);
    }
    context.reset();
    engine.reset();
    for (CUdeviceptr p : inputs) cuda.mem_free(p);
    for (auto &[name, p] : allocated) cuda.mem_free(p);
    return 0;
}
