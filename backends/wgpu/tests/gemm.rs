//! The register-tiled matrix kernel (kiln_wgpu::gemm): every variant validates with naga,
//! computes the right product on the adapter at hand (odd edges included), and the
//! MatrixMultiply layer takes it. `gemm_4096_bench` is ignored by default (minutes on
//! lavapipe): run it on a GPU with `--ignored --nocapture`.

use kiln_wgpu::bench::{dispatch_overhead, time_gemm, time_matmul, BenchError};
use kiln_wgpu::gemm::{Accumulate, GemmKernel, F32_TACTICS};

fn skip() -> bool {
    match kiln_wgpu::device::shared() {
        Ok(_) => false,
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
            true
        }
    }
}

fn f16_kernels() -> [GemmKernel; 2] {
    [GemmKernel::f16(8, 8, 8, Accumulate::F32), GemmKernel::f16(8, 8, 16, Accumulate::F16)]
}

#[test]
fn every_variant_validates_with_naga() {
    let mut all: Vec<GemmKernel> = F32_TACTICS.to_vec();
    all.extend(f16_kernels());
    for kernel in all {
        assert!(kernel.is_valid(), "{kernel:?}");
        let source = kernel.source();
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{}: {}", kernel.name(), e.emit_to_string(&source)));
        let caps = naga::valid::Capabilities::SHADER_FLOAT16;
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", kernel.name(), e.emit_to_string(&source)));
    }
    assert!(!GemmKernel::f32(8, 4, 4).is_valid(), "a stage of 64 vec4 cannot be filled by 256 invocations");
}

#[test]
fn every_variant_computes_the_product() {
    if skip() {
        return;
    }
    // Ragged M and N (not multiples of any tile) and K not a multiple of the depth.
    for kernel in F32_TACTICS {
        let run = time_gemm(131, 196, 68, 2, kernel).expect("gemm run");
        assert!(run.rel_error < 1e-5, "{}: relative error {} over {}", kernel.name(), run.rel_error, run.checked);
    }
    for kernel in f16_kernels() {
        match time_gemm(131, 196, 68, 2, kernel) {
            Ok(run) => assert!(run.rel_error < 2e-2, "{}: relative error {}", kernel.name(), run.rel_error),
            Err(BenchError::NoF16 { adapter }) => eprintln!("SKIPPED: {adapter} has no SHADER_F16"),
            Err(e) => panic!("{}: {e}", kernel.name()),
        }
    }
}

#[test]
fn odd_shapes_are_refused_not_miscomputed() {
    if skip() {
        return;
    }
    assert!(matches!(time_gemm(64, 66, 64, 1, F32_TACTICS[0]), Err(BenchError::BadShape { .. })));
    assert!(matches!(time_gemm(64, 64, 64, 1, GemmKernel::f32(8, 8, 6)), Err(BenchError::BadKernel(_))));
}

#[test]
fn empty_dispatches_are_timed() {
    if skip() {
        return;
    }
    let o = dispatch_overhead(50).expect("overhead");
    assert!(o.raw_us > 0.0 && o.recorder_us > 0.0, "{o:?}");
}

#[test]
#[ignore]
fn gemm_4096_bench() {
    if skip() {
        return;
    }
    let gpu = kiln_wgpu::device::shared().unwrap();
    let (m, n, k) = (4096, 4096, 4096);
    println!("BENCH adapter {} ({:?}), features {:?}", gpu.info.name, gpu.info.backend, gpu.features);
    for (wide, name) in [(false, "old matmul.wgsl 64x64"), (true, "old matmul_wide.wgsl 128x128")] {
        let t = time_matmul(m, n, k, 10, wide).expect("timing");
        println!("BENCH {name}: median {:.3} ms = {:.2} TFLOP/s ({})", t.median_ms, t.tflops, t.timer);
    }
    let mut all: Vec<GemmKernel> = F32_TACTICS.to_vec();
    all.extend(f16_kernels());
    all.push(GemmKernel::f16(8, 8, 8, Accumulate::F16));
    for kernel in all {
        match time_gemm(m, n, k, 30, kernel) {
            Ok(r) => println!(
                "BENCH {} 4096^3: median {:.3} ms = {:.2} TFLOP/s ({}), rel error {:.2e} over {}",
                kernel.name(),
                r.timing.median_ms,
                r.timing.tflops,
                r.timing.timer,
                r.rel_error,
                r.checked
            ),
            Err(e) => println!("BENCH {}: {e}", kernel.name()),
        }
    }
    let o = dispatch_overhead(1000).expect("overhead");
    println!(
        "BENCH empty dispatch: {:.2} us wall raw, {:.2} us through kiln's Recorder, GPU {:?} us",
        o.raw_us, o.recorder_us, o.gpu_us
    );
}

/// A row-major 256×192 · 192×160 product: the builder times every tile variant as a
/// tactic (GPU timestamps), caches them, and the engine still matches the cpu oracle.
#[test]
fn builder_times_tile_variants_as_tactics_and_the_engine_matches() {
    use kiln::tactics::TimingCache;
    use kiln::{Backend, Builder, BuilderConfig, DataType, ExecutionContext, HostTensor, LayerKind, MatrixOp};
    use kiln::{Network, Shape, TensorData};
    if skip() {
        return;
    }
    let wgpu = kiln_wgpu::WgpuBackend::new();
    let mut net = Network::new("product");
    let a = net.add_input("a", DataType::F32, Shape::fixed(&[256, 192])).unwrap();
    let mut seed = 0x5eed_u64;
    let mut values = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    };
    let w = net.add_weights(HostTensor::new(vec![192, 160], TensorData::F32(values(192 * 160))).unwrap());
    let w = net.add_layer("w", LayerKind::Constant { weights: w }, vec![]).unwrap();
    let w = net.output(w, 0);
    let mm = net
        .add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![Some(a), Some(w)])
        .unwrap();
    let y = net.output(mm, 0);
    net.mark_output(y).unwrap();
    let mut config = BuilderConfig::default();
    let cache = config.set_timing_cache(TimingCache::new(), false);
    let engine = Builder::new(&wgpu).build(&net, &config).expect("build with tactic timing");
    let cache = cache.lock().unwrap().clone();
    let entry = cache
        .entries()
        .map(|(_, e)| e.clone())
        .find(|e| e.layer_kind == "MatrixMultiply")
        .expect("the product was timed");
    eprintln!("tactics timed: {:?}", entry.candidates);
    assert_eq!(entry.candidates.len(), F32_TACTICS.len(), "every tile variant is a candidate");
    assert!(entry.candidates.iter().all(|(_, ns)| *ns > 0), "every candidate has a device time");
    let chosen = kiln_wgpu::tactics::kernel_of(&entry.chosen).expect("the chosen tactic names a variant");
    let feed = HostTensor::new(vec![256, 192], TensorData::F32(values(256 * 192))).unwrap();
    let choices = kiln_wgpu::tactics::adopt(engine.network(), engine.tactics());
    assert_eq!(choices.get(&(256, 160, 192)).copied(), Some(chosen), "the launcher runs the chosen variant");
    assert_eq!(kiln_wgpu::tactics::kernel_for(&choices, 256, 160, 192), chosen);
    let other = F32_TACTICS.iter().copied().find(|k| *k != chosen).expect("two variants");
    let others = [((256, 160, 192), other)].into_iter().collect();
    assert_eq!(kiln_wgpu::tactics::kernel_for(&others, 256, 160, 192), other, "choices are per engine, not per process");
    assert_eq!(kiln_wgpu::tactics::kernel_for(&choices, 256, 160, 192), chosen, "another engine's choices change nothing");
    let ctx = ExecutionContext::new(engine, &wgpu).expect("prepare");
    let got = ctx.run(&[("a".to_string(), feed.clone())].into_iter().collect()).expect("run");
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&[feed]).unwrap();
    let (got, want) = (got.values().next().unwrap().to_f64_vec(), want[0].to_f64_vec());
    let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).fold(0.0, f64::max);
    assert!(worst < 1e-5, "worst error {worst}");
}

/// A ResNet-18-shaped network (batch 8, 224×224, random weights) built with kiln's API:
/// end-to-end time through `ExecutionContext::run` (input upload and output read back
/// included) and that time per layer of the built engine. Ignored by default (a GPU bench).
#[test]
#[ignore]
fn resnet18_end_to_end_bench() {
    use kiln::{ActivationKind, Builder, BuilderConfig, ConvolutionParams, DataType, ElementwiseOp, ExecutionContext};
    use kiln::{HostTensor, MatrixOp, Network, PoolingKind, PoolingParams, Shape, TensorData, TensorId};
    if skip() {
        return;
    }
    let (batch, side) = (8usize, 224usize);
    let mut net = Network::new("resnet18");
    let mut seed = 0x5eed_u64;
    let mut values = |len: usize, scale: f32| -> TensorData {
        TensorData::F32(
            (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
                })
                .collect(),
        )
    };
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[batch, 3, side, side])).unwrap();
    let mut conv = |net: &mut Network, x: TensorId, cin: usize, cout: usize, k: usize, stride: usize, relu: bool| {
        let scale = (2.0 / (cin * k * k) as f32).sqrt();
        let l = net.add_convolution(x, cout, &[k, k], values(cout * cin * k * k, scale), Some(values(cout, 0.1))).unwrap();
        let pad = k / 2;
        let p = ConvolutionParams {
            groups: 1,
            strides: vec![stride; 2],
            dilations: vec![1; 2],
            pre_padding: vec![pad; 2],
            post_padding: vec![pad; 2],
        };
        net.set_convolution_params(l, p).unwrap();
        let y = net.output(l, 0);
        if relu {
            let r = net.add_activation(y, ActivationKind::Relu).unwrap();
            net.output(r, 0)
        } else {
            y
        }
    };
    let mut y = conv(&mut net, x, 3, 64, 7, 2, true);
    let pool = net.add_pooling(y, PoolingKind::Max, &[3, 3]).unwrap();
    let p = PoolingParams {
        kind: PoolingKind::Max,
        window: vec![3, 3],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pre_padding: vec![1, 1],
        post_padding: vec![1, 1],
        ceil_mode: false,
        average_count_excludes_padding: true,
    };
    net.set_pooling_params(pool, p).unwrap();
    y = net.output(pool, 0);
    let mut cin = 64;
    for (stage, cout) in [64usize, 128, 256, 512].into_iter().enumerate() {
        for block in 0..2 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let h = conv(&mut net, y, cin, cout, 3, stride, true);
            let h = conv(&mut net, h, cout, cout, 3, 1, false);
            let skip = if stride != 1 || cin != cout { conv(&mut net, y, cin, cout, 1, stride, false) } else { y };
            let sum = net.add_elementwise(h, skip, ElementwiseOp::Sum).unwrap();
            let sum = net.output(sum, 0);
            let r = net.add_activation(sum, ActivationKind::Relu).unwrap();
            y = net.output(r, 0);
            cin = cout;
        }
    }
    let gap = net.add_pooling(y, PoolingKind::Average, &[7, 7]).unwrap();
    let flat = net.add_reshape(net.output(gap, 0), &[batch as i64, 512]).unwrap();
    let fc_w = net.add_weights(HostTensor::new(vec![512, 1000], values(512 * 1000, 0.05)).unwrap());
    let fc_w = net.add_layer("fc_w", kiln::LayerKind::Constant { weights: fc_w }, vec![]).unwrap();
    let (flat, fc_w) = (net.output(flat, 0), net.output(fc_w, 0));
    let fc = net.add_matrix_multiply(flat, MatrixOp::None, fc_w, MatrixOp::None).unwrap();
    let logits = net.output(fc, 0);
    net.mark_output(logits).unwrap();
    let feed = HostTensor::new(vec![batch, 3, side, side], values(batch * 3 * side * side, 1.0)).unwrap();
    let inputs: std::collections::HashMap<String, HostTensor> = [("x".to_string(), feed)].into_iter().collect();
    // With the per-context arena (the default) and with a buffer per tensor, so a change in
    // either shows which side it is on; buffers created per timed run say whether the arena held.
    for (mode, wgpu) in [("arena", kiln_wgpu::WgpuBackend::new()), ("no arena", kiln_wgpu::WgpuBackend::without_memory_reuse())] {
        let engine = Builder::new(&wgpu).build(&net, &BuilderConfig::default()).expect("build");
        let layers = engine.network().layers().len();
        let ctx = ExecutionContext::new(engine, &wgpu).expect("prepare");
        for _ in 0..2 {
            let out = ctx.run(&inputs).expect("warm-up run");
            let logits = out.values().next().unwrap().to_f64_vec();
            assert!(logits.iter().all(|v| v.is_finite()), "non-finite logits");
        }
        let created_before = kiln_wgpu::device::shared().map(|g| g.buffers_created()).unwrap_or(0);
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let start = std::time::Instant::now();
                ctx.run(&inputs).expect("run");
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let created = kiln_wgpu::device::shared().map(|g| g.buffers_created()).unwrap_or(0) - created_before;
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        let flops = 2.0 * 1.814e9 * batch as f64;
        println!(
            "BENCH resnet18 b{batch} {side}x{side} f32 end-to-end ({mode}): median {ms:.2} ms ({:.2} TFLOP/s), {layers} layers, {:.1} us per layer, {:.0} buffers created per run",
            flops / (ms * 1e-3) / 1e12,
            ms * 1e3 / layers as f64,
            created as f64 / 5.0
        );
    }
}
