// What run_engine.cpp and run_engine_device.cpp share: handle owners, the fixed input
// pattern, and the printed form of an output (`name: d0 d1 …: v0 v1 …`), so that the two
// programs' outputs compare line by line.
#pragma once

#include "kiln.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

struct EngineFree {
    void operator()(KilnEngine *e) const { kiln_engine_free(e); }
};
struct ContextFree {
    void operator()(KilnContext *c) const { kiln_context_free(c); }
};

inline int fail(const char *what) {
    std::fprintf(stderr, "error: %s: %s\n", what, kiln_last_error());
    return 1;
}

// The declared dims of input `name` (dynamic dims become 1) into dims[0..8), its rank into
// `rank`, and its values: k % 7 * 0.125 for element k. False (with a message) on failure.
inline bool pattern_input(KilnEngine *engine, const std::string &name, int64_t dims[8], int &rank, std::vector<float> &values) {
    if (kiln_engine_io_dtype(engine, name.c_str()) != KILN_F32) {
        std::fprintf(stderr, "error: input %s is not f32\n", name.c_str());
        return false;
    }
    rank = kiln_engine_io_shape(engine, name.c_str(), dims, 8);
    if (rank < 0) {
        fail("input shape");
        return false;
    }
    size_t elements = 1;
    for (int d = 0; d < rank; ++d) {
        if (dims[d] < 0) dims[d] = 1;
        elements *= static_cast<size_t>(dims[d]);
    }
    values.resize(elements);
    for (size_t k = 0; k < elements; ++k) values[k] = static_cast<float>(k % 7) * 0.125f;
    return true;
}

// The dims of output `name` of the last run into dims[0..8) and their volume; -1 on failure.
inline long long output_dims(KilnContext *context, const std::string &name, int64_t dims[8], int &rank) {
    rank = kiln_context_output_shape(context, name.c_str(), dims, 8);
    if (rank < 0) {
        fail("output shape");
        return -1;
    }
    long long elements = 1;
    for (int d = 0; d < rank; ++d) elements *= dims[d];
    return elements;
}

inline void print_output(const std::string &name, const int64_t *dims, int rank, const std::vector<float> &values) {
    std::printf("%s:", name.c_str());
    for (int d = 0; d < rank; ++d) std::printf(" %lld", static_cast<long long>(dims[d]));
    std::printf(":");
    for (float v : values) std::printf(" %.9g", v);
    std::printf("\n");
}
