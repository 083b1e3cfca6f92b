// Device-side help for timing: `spin_cycles` keeps the stream busy for a given number of SM
// clock cycles, so work enqueued behind it by the host runs back to back on the device and
// events between its parts measure the device alone, not launches. Cycles, not %globaltimer:
// the global timer ticks only every microsecond or coarser (a millisecond on some drivers).
#include "common.cuh"

extern "C" __global__ void spin_cycles(i64 cycles) {
    const i64 start = clock64();
    while (clock64() - start < cycles) {
    }
}
