//! kiln's MatrixMultiply layer against cuBLASLt driven directly, at 8192³, in the same process
//! (CUDA events, a warm-up, medians). Runs only with `KILN_CUDA_BENCH=1` (on the GPU machine).

use crate::common::{random, rng};
use kiln::{DataType, LayerKind, MatrixOp, Network, Shape};
use kiln_cuda::blas::Gemm;
use kiln_cuda::CudaBackend;

fn median(times: &[f32]) -> f32 {
    times[times.len() / 2]
}

fn bench(dtype: DataType, tf32: bool, n: usize, reps: usize) -> (f32, f32) {
    let backend = CudaBackend::new();
    let mut net = Network::new("gemm");
    let a = net.add_input("a", dtype, Shape::fixed(&[n, n])).unwrap();
    let b = net.add_input("b", dtype, Shape::fixed(&[n, n])).unwrap();
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![Some(a), Some(b)]).unwrap();
    let out = net.output(mm, 0);
    net.mark_output(out).unwrap();
    let control = kiln::ir::control::lower(&net, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT).expect("lower");
    let exe = backend.prepare_cuda_plan(&net, &control, &[], kiln::MathMode { tf32, ..kiln::MathMode::EXACT }).expect("prepare");
    let gpu = exe.gpu().clone();
    let mut r = rng(11);
    let da = gpu.upload(&random(&mut r, dtype, &[n, n])).unwrap();
    let db = gpu.upload(&random(&mut r, dtype, &[n, n])).unwrap();
    let c = gpu.empty(dtype, vec![n, n]).unwrap();
    let g = Gemm {
        dtype,
        scaled: None,
        tf32,
        m: n as u64,
        n: n as u64,
        k: n as u64,
        batch: 1,
        trans_a: false,
        trans_b: false,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
        alpha: 1.0,
        epilogue: Default::default(),
    };
    // Alternating rounds, so clock and thermal drift hit both sides alike.
    let (mut layer, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        layer.extend(gpu.time_ms(reps, || exe.execute_device(&[da.clone(), db.clone()]).map(drop).map_err(|e| e.to_string())).expect("time the layer"));
        direct.extend(gpu.time_ms(reps, || gpu.blas.matmul(&g, 0, &da.buf, &db.buf, &c.buf).map_err(|e| e.to_string())).expect("time cuBLASLt"));
    }
    layer.sort_by(f32::total_cmp);
    direct.sort_by(f32::total_cmp);
    (median(&layer), median(&direct))
}

#[test]
fn matrix_multiply_8192_against_cublaslt() {
    if std::env::var("KILN_CUDA_BENCH").as_deref() != Ok("1") {
        eprintln!("SKIPPED: set KILN_CUDA_BENCH=1 to time MatrixMultiply against cuBLASLt (GPU machine)");
        return;
    }
    if crate::common::backend().is_none() {
        return;
    }
    let n = 8192usize;
    let flops = 2.0 * (n as f64).powi(3);
    let mut rows = Vec::new();
    for (label, dtype, tf32) in [("tf32", DataType::F32, true), ("fp16", DataType::F16, false), ("bf16", DataType::BF16, false), ("fp32", DataType::F32, false)] {
        let (layer, direct) = bench(dtype, tf32, n, 10);
        let tflops = |ms: f32| flops / (ms as f64 * 1e-3) / 1e12;
        rows.push(format!(
            "BENCH matmul {n}^3 {label}: kiln layer {layer:.3} ms ({:.0} TFLOP/s), cuBLASLt direct {direct:.3} ms ({:.0} TFLOP/s), ratio {:.3}",
            tflops(layer),
            tflops(direct),
            direct / layer
        ));
        println!("{}", rows.last().unwrap());
    }
}
