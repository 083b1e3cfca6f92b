/* Optimization profiles from C: two contexts of one engine, each on its own profile.
 * Usage: profiles ENGINE (the PyTorch CNN: input `image` f32[N,3,32,32], profile 0 for N in
 * 1..2, profile 1 for N in 3..8; output `probs` f32[N,10]). Prints `ok` and exits 0 when every check holds. */
#include "check.h"

static float images[8 * 3 * 32 * 32];

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    KilnEngine *engine = kiln_engine_load(argv[1]);
    check(engine != NULL, "the engine loads");
    if (engine == NULL) return 1;
    check(kiln_engine_profile_count(engine) == 2, "two profiles");
    for (int i = 0; i < 8 * 3 * 32 * 32; ++i) images[i] = (float)(i % 13) * 0.05f;

    KilnContext *small = kiln_context_create(engine);
    KilnContext *large = kiln_context_create(engine);
    check(kiln_context_set_profile(large, 1) == 0, "the second context takes profile 1");
    check(kiln_context_set_profile(small, 2) == -1 && error_has("profile 2 does not exist"), "a profile past the end");
    check(kiln_context_set_profile(small, -1) == -1 && error_has("negative"), "a negative profile");

    int64_t two[4] = {2, 3, 32, 32}, six[4] = {6, 3, 32, 32};
    check(kiln_context_set_input(small, "image", two, 4, images, sizeof(float) * 2 * 3 * 32 * 32) == 0, "batch 2 set");
    check(kiln_context_set_input(large, "image", six, 4, images, sizeof(float) * 6 * 3 * 32 * 32) == 0, "batch 6 set");
    check(kiln_context_execute(small) == 0, "batch 2 runs on profile 0");
    check(kiln_context_execute(large) == 0, "batch 6 runs on profile 1");
    int64_t dims[2];
    check(kiln_context_output_shape(large, "probs", dims, 2) == 2 && dims[0] == 6, "six rows of probabilities");
    float a[2 * 10], b[6 * 10];
    check(kiln_context_copy_output(small, "probs", a, sizeof a) == sizeof a, "batch 2 output");
    check(kiln_context_copy_output(large, "probs", b, sizeof b) == sizeof b, "batch 6 output");
    float worst = 0;
    for (int i = 0; i < 20; ++i) {
        float d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        worst = d > worst ? d : worst;
    }
    check(worst < 1e-4f, "the samples both batches hold get the same probabilities");

    /* Batch 6 is outside profile 0. */
    check(kiln_context_set_input(small, "image", six, 4, images, sizeof(float) * 6 * 3 * 32 * 32) == 0, "batch 6 set on profile 0");
    check(kiln_context_execute(small) == -1 && error_has("outside [1, 2] of optimization profile 0"), "refused by profile 0");

    kiln_context_free(small);
    kiln_context_free(large);
    kiln_engine_free(engine);
    if (failures == 0) printf("ok\n");
    return failures == 0 ? 0 : 1;
}
