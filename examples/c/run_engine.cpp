// Runs a kiln engine from C++ through include/kiln.h: every input is filled with a fixed
// pattern (f32 inputs only; dynamic dims become 1), and every output is printed as
// `name: dims: v0 v1 …` (f32 outputs). Exit status 1 with kiln's message on any failure.
//
//   c++ -std=c++17 -I include examples/c/run_engine.cpp -L target/debug -lkiln_capi
//       -Wl,-rpath,target/debug -o run_engine
//   ./run_engine model.engine

#include "example_io.hpp"

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
        int64_t dims[8];
        int rank = 0;
        std::vector<float> values;
        if (!pattern_input(engine.get(), name, dims, rank, values)) return 1;
        if (kiln_context_set_input(context.get(), name.c_str(), dims, rank, values.data(),
                                   values.size() * sizeof(float)) != 0)
            return fail("set input");
    }
    if (kiln_context_execute(context.get()) != 0) return fail("execute");

    for (const std::string &name : outputs) {
        int64_t dims[8];
        int rank = 0;
        const long long elements = output_dims(context.get(), name, dims, rank);
        if (elements < 0) return 1;
        std::vector<float> values(static_cast<size_t>(elements));
        if (kiln_context_copy_output(context.get(), name.c_str(), values.data(),
                                     values.size() * sizeof(float)) < 0)
            return fail("copy output");
        print_output(name, dims, rank, values);
    }
    return 0;
}
