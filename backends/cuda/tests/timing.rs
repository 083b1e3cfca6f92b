//! How tactics are timed (`Gpu::device_time_ms`), in a test binary of its own: the GPU tests
//! share one stream, and their kernels would land between this test's events.

use kiln::Backend;
use kiln_cuda::CudaBackend;
use std::time::Duration;

#[test]
fn tactic_timing_measures_the_device_not_the_launches() {
    let cuda = CudaBackend::new();
    if let Err(e) = cuda.device() {
        if std::env::var("KILN_REQUIRE_CUDA").as_deref() == Ok("1") {
            panic!("KILN_REQUIRE_CUDA=1 but CUDA is unavailable: {e}");
        }
        eprintln!("SKIPPED: no CUDA driver/device: {e}");
        return;
    }
    let gpu = cuda.gpu().expect("device");
    // A run whose host side (300 µs) is far slower than its kernel (a 5 µs wait): a
    // replayed graph pays only the kernel, and so must the time a tactic is chosen by.
    let run = || {
        std::thread::sleep(Duration::from_micros(300));
        gpu.spin(Duration::from_micros(5)).map_err(|e| e.to_string())
    };
    let device = gpu.device_time_ms(9, run).expect("device time");
    let interleaved = gpu.time_ms(9, run).expect("time");
    let (device, interleaved) = (device[4], interleaved[4]);
    eprintln!("median of a 5 µs kernel behind 300 µs of host work: device {device} ms, interleaved {interleaved} ms");
    assert!((0.004..0.05).contains(&device), "the device time is the kernel's: {device} ms");
    assert!(interleaved >= 0.25, "interleaved with the host, the gap shows: {interleaved} ms");
}
