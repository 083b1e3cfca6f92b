//! Per-context memory of the wgpu backend (kiln_wgpu's arena): a second execution creates no
//! buffers, executions from several contexts at once stay correct, a change of shapes
//! re-plans, and the results match the cpu backend. The buffer counter is process-wide,
//! so the tests of this file take turns.

#[allow(dead_code)]
#[path = "../../../engine/onnx/tests/common/pytorch_data.rs"]
mod pytorch_data;

use kiln::{Backend, BuilderConfig, ExecutionContext, HostTensor, LayerKind, Network, PreparedEngine, Shape};
use kiln_wgpu::WgpuBackend;
use pytorch_data::{read_npz, repo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn gpu() -> Option<&'static kiln_wgpu::device::Gpu> {
    match kiln_wgpu::device::shared() {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
            None
        }
    }
}

/// The network of a model in the repository and inputs for it: the fixture's own arrays
/// where it has an npz next to it, else uniform values in [-1, 1).
fn model(path: &str) -> (Network, HashMap<String, HostTensor>) {
    let path = repo().join(path);
    let net = kiln_onnx::import_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npz = path.with_extension("npz");
    let mut arrays = if npz.exists() { read_npz(&npz) } else { HashMap::new() };
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let inputs = net
        .inputs()
        .iter()
        .map(|&t| {
            let desc = net.tensor(t);
            let value = arrays.remove(&desc.name).unwrap_or_else(|| {
                let shape = desc.shape.as_fixed().expect("fixed input shape");
                let n = shape.iter().product();
                HostTensor::from_f32(shape, (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()).expect("shape")
            });
            (desc.name.clone(), value)
        })
        .collect();
    (net, inputs)
}

fn prepared(backend: &dyn Backend, net: &Network) -> Arc<PreparedEngine> {
    let engine = kiln::Builder::new(backend).build(net, &BuilderConfig::default()).expect("build");
    PreparedEngine::new(engine, backend).expect("prepare")
}

type Outputs = std::collections::BTreeMap<String, HostTensor>;

fn cpu_outputs(net: &Network, inputs: &HashMap<String, HostTensor>) -> Outputs {
    let cpu = kiln_cpu::CpuBackend::new();
    prepared(&cpu, net).create_execution_context().run(inputs).expect("cpu run")
}

/// Every output within the fp32 tier of the cpu backend's.
fn assert_matches(got: &Outputs, want: &Outputs, what: &str) {
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{what}: outputs");
    for (name, w) in want {
        let g = &got[name];
        assert_eq!(g.shape(), w.shape(), "{what}/{name}: shape");
        for (i, (a, b)) in g.to_f64_vec().iter().zip(w.to_f64_vec()).enumerate() {
            let ok = a == &b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-4 * (1.0 + b.abs());
            assert!(ok, "{what}/{name}: element {i}: wgpu {a} vs cpu {b}");
        }
    }
}

const MODELS: &[&str] = &[
    "examples/models/mnist.onnx",
    "tests/data/pytorch/cnn_torchscript.onnx",
    "tests/data/pytorch/bert_torchscript.onnx",
    "tests/data/pytorch/loop_nested.onnx",
    "tests/data/pytorch/loop_while.onnx",
];

#[test]
fn a_second_execution_creates_no_buffers() {
    let _turn = turn();
    let Some(gpu) = gpu() else { return };
    for path in MODELS {
        let (net, inputs) = model(path);
        let want = cpu_outputs(&net, &inputs);
        let context = prepared(&WgpuBackend::new(), &net).create_execution_context();
        let first = context.run(&inputs).unwrap_or_else(|e| panic!("{path}: first run: {e}"));
        assert_matches(&first, &want, path);
        let before = gpu.buffers_created();
        for run in 0..2 {
            let again = context.run(&inputs).unwrap_or_else(|e| panic!("{path}: run {}: {e}", run + 2));
            assert_matches(&again, &want, path);
        }
        let created = gpu.buffers_created() - before;
        assert_eq!(created, 0, "{path}: the second and third executions created {created} buffers");
    }
}

#[test]
fn a_profile_run_times_the_layers_and_returns_its_arena() {
    let _turn = turn();
    let Some(gpu) = gpu() else { return };
    for path in ["tests/data/pytorch/cnn_torchscript.onnx", "tests/data/pytorch/loop_nested.onnx"] {
        let (net, inputs) = model(path);
        let want = cpu_outputs(&net, &inputs);
        let context = prepared(&WgpuBackend::new(), &net).create_execution_context();
        assert_matches(&context.run(&inputs).expect("first run"), &want, path);
        let times = context.profile_layers(&inputs).expect("profile run").expect("wgpu times layers");
        let timed = times.0.iter().flatten().count();
        assert!(timed > 0 && times.0.iter().flatten().all(|t| !t.is_zero()), "{path}: {times:?}");
        let profile = kiln::runtime::layer_profile::LayerProfile::summarize(context.engine(), &[times]);
        assert_eq!(profile.layers.len(), timed, "{path}");
        let before = gpu.buffers_created();
        assert_matches(&context.run(&inputs).expect("run after the profile"), &want, path);
        assert_eq!(gpu.buffers_created(), before, "{path}: the profile run's arena went back to the pool");
    }
}

#[test]
fn contexts_on_threads_keep_their_own_memory() {
    let _turn = turn();
    if gpu().is_none() {
        return;
    }
    let (net, inputs) = model("tests/data/pytorch/cnn_torchscript.onnx");
    let engine = prepared(&WgpuBackend::new(), &net);
    // Each thread its own inputs (the fixture's, scaled), so a shared buffer would show.
    let cases: Vec<(HashMap<String, HostTensor>, Outputs)> = (0..4)
        .map(|k| {
            let scaled: HashMap<String, HostTensor> = inputs
                .iter()
                .map(|(n, t)| {
                    let v = t.to_f64_vec().iter().map(|&x| (x * (1.0 + k as f64 * 0.5)) as f32).collect();
                    (n.clone(), HostTensor::from_f32(t.shape().to_vec(), v).expect("shape"))
                })
                .collect();
            let want = cpu_outputs(&net, &scaled);
            (scaled, want)
        })
        .collect();
    std::thread::scope(|s| {
        for (k, (feeds, want)) in cases.iter().enumerate() {
            let context = engine.create_execution_context();
            s.spawn(move || {
                for run in 0..4 {
                    let got = context.run(feeds).unwrap_or_else(|e| panic!("thread {k} run {run}: {e}"));
                    assert_matches(&got, want, &format!("thread {k} run {run}"));
                }
            });
        }
    });
}

/// x[N, 64] · W[64, 32] → ReLU → SoftMax, N named: each shape is its own trace.
fn dynamic_network() -> Network {
    let mut net = Network::new("dynamic");
    let x = net
        .add_input("x", kiln::DataType::F32, Shape(vec![kiln::ir::shape::Dim::Named("N".into()), 64.into()]))
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let w = HostTensor::from_f32(vec![64, 32], (0..64 * 32).map(|_| rng.gen_range(-0.2..0.2)).collect()).unwrap();
    let w = net.add_weights(w);
    let w = net.add_layer("w", LayerKind::Constant { weights: w }, vec![]).unwrap();
    let w = net.output(w, 0);
    let op = kiln::ir::layer::MatrixOp::None;
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: op, op_b: op }, vec![Some(x), Some(w)]).unwrap();
    let relu = LayerKind::Activation { kind: kiln::ActivationKind::Relu };
    let relu = net.add_layer("relu", relu, vec![Some(net.output(mm, 0))]).unwrap();
    let sm = net.add_layer("softmax", LayerKind::SoftMax { axis: 1 }, vec![Some(net.output(relu, 0))]).unwrap();
    let out = net.output(sm, 0);
    net.mark_output(out).unwrap();
    net
}

#[test]
fn new_shapes_re_plan_and_repeated_ones_reuse() {
    let _turn = turn();
    let Some(gpu) = gpu() else { return };
    let net = dynamic_network();
    let exe = WgpuBackend::new().prepare(&net).expect("prepare");
    let cpu = kiln_cpu::CpuBackend::new().prepare(&net).expect("cpu prepare");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for (run, rows) in [4usize, 4, 9, 4, 4, 4].into_iter().enumerate() {
        let x = HostTensor::from_f32(vec![rows, 64], (0..rows * 64).map(|_| rng.gen_range(-1.0..1.0)).collect());
        let feeds = [x.unwrap()];
        let before = gpu.buffers_created();
        let got = exe.execute(&feeds).expect("wgpu run");
        let created = gpu.buffers_created() - before;
        let want = cpu.execute(&feeds).expect("cpu run");
        for (a, b) in got[0].to_f64_vec().iter().zip(want[0].to_f64_vec()) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "run {run} ({rows} rows): wgpu {a} vs cpu {b}");
        }
        // Runs 1 and 4 follow the plan of the run before; the others (first, new shape,
        // back to the old one) plan anew.
        let reused = matches!(run, 1 | 4 | 5);
        assert_eq!(created == 0, reused, "run {run} ({rows} rows) created {created} buffers");
    }
}

fn time_runs(context: &ExecutionContext, inputs: &HashMap<String, HostTensor>, runs: usize) -> Duration {
    context.run(inputs).expect("warm-up run");
    context.run(inputs).expect("warm-up run");
    let start = Instant::now();
    for _ in 0..runs {
        context.run(inputs).expect("run");
    }
    start.elapsed() / runs as u32
}

/// Per-run time with and without the arena (prints; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn per_run_time_with_and_without_arenas() {
    let _turn = turn();
    let Some(gpu) = gpu() else { return };
    for path in ["examples/models/mnist.onnx", "tests/data/pytorch/cnn_torchscript.onnx"] {
        let (net, inputs) = model(path);
        let mut line = format!("{path} on {}:", gpu.info.name);
        for (label, backend) in
            [("buffer per tensor", WgpuBackend::without_memory_reuse()), ("arena", WgpuBackend::new())]
        {
            let context = prepared(&backend, &net).create_execution_context();
            let before = gpu.buffers_created();
            let t = time_runs(&context, &inputs, 50);
            let per_run = (gpu.buffers_created() - before) as f64 / 52.0;
            line += &format!("  {label}: {:.3} ms/run, {per_run:.1} buffers/run;", t.as_secs_f64() * 1e3);
        }
        println!("{line}");
    }
}

/// `x ← x + 1` over a [4] recurrence from the input `x0` (a device value, so the body runs
/// kernels rather than host arithmetic), `trips` (an input) times: a counted loop, or a
/// while loop whose body counts `i` up to `trips` (its condition read back every trip).
/// Outputs the last `x`, and with `stacked` every trip's `x` too.
fn counting_loop(kind: kiln::TripLimitKind, stacked: bool) -> Network {
    use kiln::{DataType, ElementwiseOp, LoopOutputKind, TensorData};
    let mut n = Network::new("counting");
    let trips = n.add_input("trips", DataType::I32, Shape::fixed(&[])).unwrap();
    let constant = |n: &mut Network, dims: &[usize], data: TensorData| {
        let l = n.add_constant(dims, data).unwrap();
        n.output(l, 0)
    };
    let x0 = n.add_input("x0", DataType::F32, Shape::fixed(&[4])).unwrap();
    let ones = constant(&mut n, &[4], TensorData::F32(vec![1.0; 4]));
    let looping = n.add_loop();
    let x = n.add_recurrence(looping, x0).unwrap();
    let next = n.add_elementwise(n.output(x, 0), ones, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(x, n.output(next, 0)).unwrap();
    match kind {
        kiln::TripLimitKind::Count => {
            n.add_trip_limit(looping, trips, kind).unwrap();
        }
        kiln::TripLimitKind::While => {
            let zero = constant(&mut n, &[], TensorData::I32(vec![0]));
            let one = constant(&mut n, &[], TensorData::I32(vec![1]));
            let i = n.add_recurrence(looping, zero).unwrap();
            let more = n.add_elementwise(n.output(i, 0), trips, ElementwiseOp::Less).unwrap();
            n.add_trip_limit(looping, n.output(more, 0), kind).unwrap();
            let i_next = n.add_elementwise(n.output(i, 0), one, ElementwiseOp::Sum).unwrap();
            n.set_recurrence_next(i, n.output(i_next, 0)).unwrap();
        }
    }
    let last = n.add_loop_output(looping, n.output(x, 0), LoopOutputKind::LastValue, 0).unwrap();
    n.mark_output(n.output(last, 0)).unwrap();
    if stacked {
        let all = n.add_loop_output(looping, n.output(next, 0), LoopOutputKind::Concatenate, 0).unwrap();
        n.mark_output(n.output(all, 0)).unwrap();
    }
    n
}

/// Buffers and bytes the first execution of `net` creates for `trips` (a fresh executable:
/// nothing pooled yet), after checking its results.
fn first_run_creates(gpu: &kiln_wgpu::device::Gpu, net: &Network, trips: usize) -> (u64, u64) {
    let exe = WgpuBackend::new().prepare(net).expect("prepare");
    let feeds = [
        HostTensor::new(vec![], kiln::TensorData::I32(vec![trips as i32])).unwrap(),
        HostTensor::from_f32(vec![4], vec![0.0; 4]).unwrap(),
    ];
    let (buffers, bytes) = (gpu.buffers_created(), gpu.bytes_created());
    let got = exe.execute(&feeds).unwrap_or_else(|e| panic!("{trips} trips: {e}"));
    let created = (gpu.buffers_created() - buffers, gpu.bytes_created() - bytes);
    assert_eq!(got[0].to_f64_vec(), vec![trips as f64; 4], "{trips} trips: the last value");
    if let Some(all) = got.get(1) {
        assert_eq!(all.shape(), &[trips, 4], "{trips} trips: the stacked values");
        let want: Vec<f64> = (1..=trips).flat_map(|t| [t as f64; 4]).collect();
        assert_eq!(all.to_f64_vec(), want, "{trips} trips: the stacked values");
    }
    created
}

/// Memory of a loop does not grow with its trips beyond what its stacked output needs:
/// dead tensors' buffers are reused, parameters and submissions stay bounded.
#[test]
fn a_loop_runs_in_memory_bounded_by_its_live_tensors() {
    let _turn = turn();
    let Some(gpu) = gpu() else { return };
    for kind in [kiln::TripLimitKind::Count, kiln::TripLimitKind::While] {
        for stacked in [false, true] {
            let net = counting_loop(kind, stacked);
            let (few_buffers, few_bytes) = first_run_creates(gpu, &net, 1024);
            let (many_buffers, many_bytes) = first_run_creates(gpu, &net, 8192);
            // Stacked: every trip's x kept (a buffer each) for the output, which is a buffer
            // of all of them, and its read-back.
            let (parts, bytes) = if stacked { (8192 - 1024, 3 * (8192 - 1024) * 16) } else { (0, 0) };
            let what = format!("{kind:?} loop (stacked: {stacked})");
            println!("{what}: 1024 trips {few_buffers} buffers {few_bytes} B, 8192 trips {many_buffers} buffers {many_bytes} B");
            let buffers_bound = few_buffers + parts + 4;
            assert!(many_buffers <= buffers_bound, "{what}: {few_buffers} buffers for 1024 trips, {many_buffers} for 8192");
            assert!(
                many_bytes <= few_bytes + bytes + (64 << 10),
                "{what}: {few_bytes} bytes for 1024 trips, {many_bytes} for 8192"
            );
        }
    }
}
