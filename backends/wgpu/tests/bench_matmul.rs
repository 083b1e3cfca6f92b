//! MatrixMultiply kernel timing. `matmul_4096_f32` is ignored by default (minutes on
//! lavapipe): run it on a GPU with `--ignored --nocapture`.

use kiln_wgpu::bench::time_matmul;

fn skip() -> bool {
    match kiln_wgpu::device::shared() {
        Ok(_) => false,
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
            true
        }
    }
}

#[test]
fn small_matmul_is_timed() {
    if skip() {
        return;
    }
    for wide in [false, true] {
        let t = time_matmul(128, 96, 64, 3, wide).expect("timing");
        assert!(t.median_ms > 0.0 && t.tflops.is_finite(), "{t:?}");
    }
}

#[test]
#[ignore]
fn matmul_4096_f32() {
    if skip() {
        return;
    }
    let gpu = kiln_wgpu::device::shared().unwrap();
    for (wide, name) in [(false, "64x64 tile"), (true, "128x128 tile")] {
        let t = time_matmul(4096, 4096, 4096, 20, wide).expect("timing");
        println!(
            "BENCH wgpu matmul 4096^3 f32, {name}, on {} ({:?}): median {:.3} ms = {:.2} TFLOP/s ({})",
            gpu.info.name, gpu.info.backend, t.median_ms, t.tflops, t.timer
        );
    }
}
