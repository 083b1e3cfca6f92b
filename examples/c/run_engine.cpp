// Runs a kiln engine from C++ through include/kiln.h: every input is filled with a fixed
// pattern (f32 inputs only; dynamic dims become 1), and every output is printed as
// `name: dims: v0 v1 …` (f32 outputs). Exit status 1 with kiln's message on any failure.
//
//   c++ -std=c++17 -I include examples/c/run_engine.cpp -L target/debug -lkiln_capi
//       -Wl,-rpath,target/debug -o run_engine
//   ./run_engine model.engine

#include "kiln.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

struct EngineFree {
    void operator()(KilnEngine *e) const { kiln_engine_free(e); }
};
struct ContextFree {
    void operator()(KilnContext *c) const { kiln_context_free(c); }
};

int fail(const char *what) {
    std::fprintf(stderr, "error: %s: %s\n", what, kiln_last_error());
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s ENGINE\n", argv[0]);
        return 2;
    }
    std::unique_ptr<KilnEngine, EngineFree> engine(kiln_engine_load(argv[1]));
    if (!engine) return fail("load");
    std::unique_ptr<KilnContext, ContextFree> context(kiln_context_create(engine.get()));
    if (!context) return fail("context");

    const int count = kiln_engine_io_count(engine.get());
    std::vector<std::string> outputs;
    for (int i = 0; i < count; ++i) {
        const std::string name = kiln_engine_io_name(engine.get(), i);
        if (kiln_engine_is_input(engine.get(), name.c_str()) == 0) {
            outputs.push_back(name);
            continue;
        }
        if (kiln_engine_io_dtype(engine.get(), name.c_str()) != KILN_F32) {
            std::fprintf(stderr, "error: input %s is not f32\n", name.c_str());
            return 1;
        }
        int64_t dims[8];
        const int rank = kiln_engine_io_shape(engine.get(), name.c_str(), dims, 8);
        if (rank < 0) return fail("input shape");
        size_t elements = 1;
        for (int d = 0; d < rank; ++d) {
            if (dims[d] < 0) dims[d] = 1;
            elements *= static_cast<size_t>(dims[d]);
        }
        std::vector<float> values(elements);
        for (size_t k = 0; k < elements; ++k) values[k] = static_cast<float>(k % 7) * 0.125f;
        if (kiln_context_set_input(context.get(), name.c_str(), dims, rank, values.data(),
                                   values.size() * sizeof(float)) != 0)
            return fail("set input");
    }
    if (kiln_context_execute(context.get()) != 0) return fail("execute");

    for (const std::string &name : outputs) {
        int64_t dims[8];
        const int rank = kiln_context_output_shape(context.get(), name.c_str(), dims, 8);
        if (rank < 0) return fail("output shape");
        size_t elements = 1;
        std::printf("%s:", name.c_str());
        for (int d = 0; d < rank; ++d) {
            elements *= static_cast<size_t>(dims[d]);
            std::printf(" %lld", static_cast<long long>(dims[d]));
        }
        std::printf(":");
        std::vector<float> values(elements);
        if (kiln_context_copy_output(context.get(), name.c_str(), values.data(),
                                     values.size() * sizeof(float)) < 0)
            return fail("copy output");
        for (float v : values) std::printf(" %.9g", v);
        std::printf("\n");
    }
    return 0;
}
