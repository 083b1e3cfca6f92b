//! Whole executions: the activation arena, CUDA graph capture and replay against interpreted
//! runs, device phase times, several contexts on one engine at once, out of memory.

use crate::common::{backend, exact_f32_config, worst_error};
use crate::pytorch_data::reference_model;
use kiln::{Backend, BackendError, DataType, ExecutionContext, HostTensor, Network, PreparedEngine, TensorData};
use kiln_cuda::arena::{ArenaPlan, Event};
use kiln_cuda::{CudaBackend, GpuError};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(crate) struct Fixture {
    pub net: Network,
    pub inputs: HashMap<String, HostTensor>,
    expected: HashMap<String, HostTensor>,
}

pub(crate) fn fixture(name: &str) -> Fixture {
    let (net, inputs, expected) = reference_model(name);
    Fixture { net, inputs, expected }
}

/// The fixture built in f32 or with every float layer constrained to f16.
pub(crate) fn prepare(cuda: &CudaBackend, net: &Network, f16: bool) -> Arc<PreparedEngine> {
    let mut net = net.clone();
    let mut config = exact_f32_config();
    if f16 {
        for i in 0..net.layers().len() {
            if kiln::precision::is_float_compute(&net.layers()[i].kind) {
                net.set_layer_precision(kiln::LayerId(i), DataType::F16).unwrap();
            }
        }
        config.set_flag(kiln::BuilderFlag::Fp16);
        config.set_flag(kiln::BuilderFlag::PreferPrecisionConstraints);
    }
    let engine = kiln::Builder::new(cuda).build(&net, &config).expect("build");
    PreparedEngine::new(engine, cuda).expect("prepare")
}

/// Inputs of the same shapes, number `k` of a series (0: the given ones): floats scaled by
/// 1 - 0.3k, integers (token ids, masks) rotated by k places.
fn changed(inputs: &HashMap<String, HostTensor>, k: usize) -> HashMap<String, HostTensor> {
    let factor = 1.0 - 0.3 * k as f32;
    inputs
        .iter()
        .map(|(n, x)| {
            let y = match x.data() {
                TensorData::F32(v) => HostTensor::from_f32(x.shape().to_vec(), v.iter().map(|a| a * factor).collect()).unwrap(),
                TensorData::I64(v) => {
                    let mut v = v.clone();
                    let len = v.len();
                    v.rotate_left(k % len.max(1));
                    HostTensor::from_i64(x.shape().to_vec(), v).unwrap()
                }
                other => panic!("{n}: no changed input of {:?}", other.dtype()),
            };
            (n.clone(), y)
        })
        .collect()
}

fn run(ctx: &ExecutionContext, inputs: &HashMap<String, HostTensor>) -> BTreeMap<String, HostTensor> {
    ctx.run(inputs).unwrap_or_else(|e| panic!("run failed: {e}"))
}

fn mode(ctx: &ExecutionContext) -> String {
    ctx.execution_mode().expect("cuda reports its execution mode")
}

/// Graph replays equal interpreted runs in the same arena, follow changed inputs, and stay
/// within the model's tolerance of PyTorch.
fn check_replay(name: &str, f16: bool, tolerance: f64) {
    let Some(cuda) = backend() else { return };
    let f = fixture(name);
    let prepared = prepare(cuda, &f.net, f16);
    let ctx = prepared.create_execution_context();
    assert!(ctx.set_graph_capture(true), "cuda captures graphs");
    let first = run(&ctx, &f.inputs);
    assert!(mode(&ctx).starts_with("recorded"), "{name}: {}", mode(&ctx));
    let captured = run(&ctx, &f.inputs);
    assert_eq!(mode(&ctx), "captured a CUDA graph", "{name}");
    let replayed = run(&ctx, &f.inputs);
    assert_eq!(mode(&ctx), "graph replay", "{name}");
    for (output, want) in &f.expected {
        let worst = worst_error(&first[output], want);
        eprintln!("{name}/{output} (f16: {f16}): worst relative error vs PyTorch {worst:.2e}");
        assert!(worst < tolerance, "{name}/{output}: {worst}");
        assert_eq!(captured[output], first[output], "{name}/{output}: the capture run differs from the first run");
        assert_eq!(replayed[output], first[output], "{name}/{output}: the replay differs from the first run");
    }
    // New inputs of the same shapes: the replay must compute them, not return stale outputs.
    let other = changed(&f.inputs, 1);
    let replayed_other = run(&ctx, &other);
    assert_eq!(mode(&ctx), "graph replay", "{name}");
    ctx.set_graph_capture(false);
    let interpreted_other = run(&ctx, &other);
    assert!(mode(&ctx).starts_with("interpreted in the arena; no graph: graph capture is off"), "{name}: {}", mode(&ctx));
    for (output, got) in &replayed_other {
        assert_ne!(got, &first[output], "{name}/{output}: a replay on new inputs returned the old outputs");
        assert_eq!(got, &interpreted_other[output], "{name}/{output}: replay and interpreted run differ on new inputs");
    }
    // And back to the first inputs after turning graphs on again (a fresh capture).
    ctx.set_graph_capture(true);
    let again = run(&ctx, &f.inputs);
    assert_eq!(mode(&ctx), "captured a CUDA graph", "{name}");
    assert_eq!(again, first, "{name}: outputs after re-capture");
}

#[test]
fn cnn_graph_replay_f32() {
    check_replay("cnn_torchscript", false, 1e-4);
}

#[test]
fn cnn_graph_replay_f16() {
    check_replay("cnn_dynamo", true, 1e-3);
}

#[test]
fn bert_graph_replay_f32() {
    check_replay("bert_torchscript", false, 1e-4);
}

#[test]
fn bert_graph_replay_f16() {
    check_replay("bert_dynamo", true, 1e-2);
}

#[test]
fn device_times_are_measured_in_every_mode() {
    let Some(cuda) = backend() else { return };
    let f = fixture("cnn_torchscript");
    let prepared = prepare(cuda, &f.net, false);
    let mut ctx = prepared.create_execution_context();
    assert_eq!(ctx.last_device_times(), None);
    ctx.set_device_timing(true);
    for graphs in [false, true] {
        ctx.set_graph_capture(graphs);
        for _ in 0..3 {
            run(&ctx, &f.inputs);
            let t = ctx.last_device_times().expect("cuda measures device times");
            eprintln!("{} — {t:?}", mode(&ctx));
            assert!(t.compute.as_nanos() > 0, "{t:?}");
            assert!(t.host_to_device.as_nanos() > 0 && t.device_to_host.as_nanos() > 0, "{t:?}");
        }
    }
    assert_eq!(mode(&ctx), "graph replay");
}

#[test]
fn a_profile_run_times_each_layer_between_graph_replays() {
    let Some(cuda) = backend() else { return };
    let f = fixture("bert_torchscript");
    let prepared = prepare(cuda, &f.net, true);
    let mut ctx = prepared.create_execution_context();
    ctx.set_device_timing(true);
    let first = run(&ctx, &f.inputs);
    run(&ctx, &f.inputs);
    run(&ctx, &f.inputs);
    assert_eq!(mode(&ctx), "graph replay");
    let compute = ctx.last_device_times().expect("device times").compute;
    let times = ctx.profile_layers(&f.inputs).expect("profile run").expect("cuda times layers");
    assert_eq!(mode(&ctx), "interpreted for a per-layer profile");
    let net = ctx.engine().network();
    let timed: Vec<_> = times.0.iter().enumerate().filter_map(|(i, t)| t.map(|t| (i, t))).collect();
    assert!(!timed.is_empty() && timed.iter().all(|(_, t)| !t.is_zero()), "{times:?}");
    assert!(timed.iter().all(|&(i, _)| !matches!(net.layers()[i].kind, kiln::LayerKind::Constant { .. } | kiln::LayerKind::Shape)));
    let total: std::time::Duration = timed.iter().map(|(_, t)| *t).sum();
    eprintln!("profiled layers: {} of {}, their sum {total:?}, a replayed execution {compute:?}", timed.len(), net.layers().len());
    // Every kernel of the execution lies between some layer's events: together they cannot
    // take much less than the replayed execution's compute.
    assert!(total.as_secs_f64() > 0.5 * compute.as_secs_f64(), "{total:?} vs {compute:?}");
    // The graph is replayed again afterwards, with the same results.
    assert_eq!(run(&ctx, &f.inputs), first);
    assert_eq!(mode(&ctx), "graph replay");
}

#[test]
fn several_contexts_run_one_engine_at_once() {
    let Some(cuda) = backend() else { return };
    let f = fixture("bert_torchscript");
    let prepared = prepare(cuda, &f.net, false);
    let feeds: Vec<HashMap<String, HostTensor>> = (0..4).map(|i| changed(&f.inputs, i)).collect();
    // Expected outputs from interpreted runs (before any graph exists).
    let reference = prepared.create_execution_context();
    reference.set_graph_capture(false);
    let want: Vec<_> = feeds.iter().map(|x| run(&reference, x)).collect();
    for (i, w) in want.iter().enumerate().skip(1) {
        assert_ne!(w, &want[0], "feed {i} gives the same outputs as feed 0: the test would not see a mix-up");
    }
    reference.set_graph_capture(true);
    std::thread::scope(|s| {
        for (feed, want) in feeds.iter().zip(&want) {
            let prepared = prepared.clone();
            s.spawn(move || {
                let ctx = prepared.create_execution_context();
                for round in 0..6 {
                    assert_eq!(&run(&ctx, feed), want, "round {round}: a concurrent run differs");
                }
            });
        }
    });
}

/// Executions that overlap take streams of their own (lanes) and give the answer a lone
/// execution gives: BERT (cuBLASLt, attention) in f32 and the CNN in f16 (cuDNN with
/// channels-last filters converted on the first run, which here is four runs at once).
#[test]
fn overlapping_executions_each_take_a_stream() {
    let Some(cuda) = backend() else { return };
    for (name, f16) in [("bert_torchscript", false), ("cnn_torchscript", true)] {
        let f = fixture(name);
        let engine = prepare(cuda, &f.net, f16);
        let exe = cuda.prepare_cuda(engine.engine().network()).expect("prepare");
        let net = engine.engine().network();
        let inputs: Vec<HostTensor> = net.inputs().iter().map(|&t| f.inputs[&net.tensor(t).name].clone()).collect();
        const THREADS: usize = 4;
        let barrier = std::sync::Barrier::new(THREADS);
        let results: Vec<Vec<Vec<HostTensor>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        (0..5).map(|_| kiln::Executable::execute(&exe, &inputs).expect("concurrent run")).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let streams = exe.streams_used();
        eprintln!("{name}: {THREADS} threads used {streams} streams");
        assert!(streams > 1 && streams <= THREADS, "{name}: {streams} streams for {THREADS} threads at once");
        let alone = kiln::Executable::execute(&exe, &inputs).expect("a lone run");
        for (thread, runs) in results.iter().enumerate() {
            for (round, got) in runs.iter().enumerate() {
                assert_eq!(got, &alone, "{name}: thread {thread}, round {round} differs from a lone run");
            }
        }
        let expected = &f.expected[&net.tensor(net.outputs()[0]).name];
        let error = worst_error(&alone[0], expected);
        assert!(error < if f16 { 5e-2 } else { 1e-3 }, "{name}: {error} from PyTorch");
    }
}

#[test]
fn a_read_back_of_a_device_shape_keeps_executions_interpreted() {
    let Some(cuda) = backend() else { return };
    let mut net = Network::new("dynamic reshape");
    let x = net.add_input("x", DataType::F32, kiln::Shape::fixed(&[2, 3])).unwrap();
    let dims = net.add_input("dims", DataType::I64, kiln::Shape::fixed(&[2])).unwrap();
    let params = kiln::ShuffleParams { reshape: Some(Vec::new()), ..Default::default() };
    let r = net.add_layer("reshape", kiln::LayerKind::Shuffle(params), vec![Some(x), Some(dims)]).unwrap();
    let relu = net.add_activation(net.layer(r).outputs[0], kiln::ActivationKind::Relu).unwrap();
    net.mark_output(net.layer(relu).outputs[0]).unwrap();
    let exe = cuda.prepare_cuda(&net).expect("prepare");
    assert!(exe.graph_blocker().is_some_and(|w| w.contains("`dims`")), "{:?}", exe.graph_blocker());
    let x = HostTensor::from_f32(vec![2, 3], vec![1.0, -2.0, 3.0, -4.0, 5.0, -6.0]).unwrap();
    for (shape, mode) in [([3i64, 2], "recorded"), ([3, 2], "interpreted in the arena"), ([6, 1], "interpreted in the arena")] {
        let dims = HostTensor::from_i64(vec![2], shape.to_vec()).unwrap();
        let out = kiln::Executable::execute(&exe, &[x.clone(), dims]).expect("run");
        assert_eq!(out[0].shape(), &[shape[0] as usize, shape[1] as usize]);
        assert_eq!(out[0].to_f64_vec(), vec![1.0, 0.0, 3.0, 0.0, 5.0, 0.0]);
        assert!(exe.last_mode().starts_with(mode), "{}", exe.last_mode());
    }
}

#[test]
fn the_arena_shares_memory_between_layers() {
    let Some(cuda) = backend() else { return };
    let f = fixture("cnn_torchscript");
    let engine = kiln::Builder::new(cuda).build(&f.net, &exact_f32_config()).expect("build");
    let exe = cuda.prepare_cuda(engine.network()).expect("prepare");
    let inputs: Vec<HostTensor> = f.net.inputs().iter().map(|&t| f.inputs[&f.net.tensor(t).name].clone()).collect();
    assert_eq!(exe.arena_bytes(&inputs), None);
    kiln::Executable::execute(&exe, &inputs).expect("first run");
    let (arena, unshared) = exe.arena_bytes(&inputs).expect("an arena after the first run");
    eprintln!("cnn arena {arena} bytes, its allocations unshared {unshared} bytes");
    assert!(arena > 0 && arena < unshared, "arena {arena} vs unshared {unshared}");
    kiln::Executable::execute(&exe, &inputs).expect("second run");
}

#[test]
fn an_arena_too_large_is_out_of_memory() {
    let Some(cuda) = backend() else { return };
    let gpu = cuda.gpu().expect("device");
    let plan = ArenaPlan::place(vec![Event::Alloc { bytes: 1 << 45 }]);
    match gpu.new_arena(plan) {
        Err(GpuError::OutOfMemory { bytes, .. }) => assert_eq!(bytes, 1 << 45),
        other => panic!("a 32 TiB arena: {other:?}"),
    }
}

#[test]
fn a_layer_too_large_is_out_of_memory() {
    let Some(cuda) = backend() else { return };
    let mut net = Network::new("huge");
    let x = net.add_input("x", DataType::F32, kiln::Shape::fixed(&[1])).unwrap();
    let shape = net.add_constant(&[2], TensorData::I64(vec![1 << 22, 1 << 21])).unwrap();
    let e = net.add_layer("expand", kiln::LayerKind::Expand, vec![Some(x), Some(net.layer(shape).outputs[0])]).unwrap();
    net.mark_output(net.layer(e).outputs[0]).unwrap();
    let exe = cuda.prepare(&net).expect("prepare");
    match exe.execute(&[HostTensor::from_f32(vec![1], vec![1.0]).unwrap()]) {
        Err(BackendError::OutOfMemory { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert!(reason.contains("expand"), "{reason}");
        }
        other => panic!("a 32 TiB layer output: {:?}", other.map(|o| o.len())),
    }
}

/// One engine with two optimization profiles: two contexts, one per profile, run at once on
/// two threads, each giving what it gives alone.
#[test]
fn two_contexts_run_two_profiles_of_one_engine_at_once() {
    let Some(cuda) = backend() else { return };
    let f = fixture("cnn_torchscript");
    let mut config = exact_f32_config();
    for (low, high) in [(1, 2), (3, 8)] {
        let mut profile = kiln::OptimizationProfile::new();
        profile.set_dimensions("image", &[low, 3, 32, 32], &[high, 3, 32, 32], &[high, 3, 32, 32]);
        config.profiles.push(profile);
    }
    let engine = kiln::Builder::new(cuda).build(&f.net, &config).expect("build");
    let prepared = PreparedEngine::new(engine, cuda).expect("prepare");
    let image = |n: usize| {
        let values = (0..n * 3 * 32 * 32).map(|i| (i % 13) as f32 * 0.05).collect();
        HashMap::from([("image".to_string(), HostTensor::from_f32(vec![n, 3, 32, 32], values).unwrap())])
    };
    let (small, large) = (image(2), image(6));
    let alone: Vec<BTreeMap<String, HostTensor>> = [(0, &small), (1, &large)]
        .into_iter()
        .map(|(profile, inputs)| {
            let mut ctx = prepared.create_execution_context();
            ctx.set_optimization_profile(profile).unwrap();
            ctx.run(inputs).expect("a lone run")
        })
        .collect();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for (profile, inputs) in [(0, &small), (1, &large)] {
            let (prepared, barrier, alone) = (&prepared, &barrier, &alone);
            s.spawn(move || {
                let mut ctx = prepared.create_execution_context();
                ctx.set_optimization_profile(profile).unwrap();
                barrier.wait();
                for round in 0..10 {
                    assert_eq!(ctx.run(inputs).expect("concurrent run"), alone[profile], "profile {profile}, round {round}");
                }
            });
        }
    });
    // The samples both batches hold get the same probabilities.
    let (a, b) = (alone[0]["probs"].as_f32().unwrap(), alone[1]["probs"].as_f32().unwrap());
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-4, "{worst}");
}

#[test]
fn convolutions_whose_weights_a_run_computes_replay_as_graphs() {
    // The filter is a network input (as a Dequantize of INT8 weights is a run's value): the
    // channels-last copy cuDNN reads must be made in the run, not cached past it; the Q/DQ
    // ResNet-50's graph replay failed with CUDA_ERROR_INVALID_VALUE when it was. A dense and a
    // grouped filter, f16, each run on new weights and checked.
    use crate::common::{random, rng};
    use kiln::{ConvolutionParams, LayerKind, Shape};
    let Some(cuda) = backend() else { return };
    let mut r = rng(75);
    for (groups, cin_per_group) in [(1, 16), (4, 4)] {
        let mut net = Network::new("run-time filter");
        let (c, k) = (16, 24);
        let x = net.add_input("x", DataType::F16, Shape::fixed(&[2, c, 9, 9])).unwrap();
        let w = net.add_input("w", DataType::F16, Shape::fixed(&[k, cin_per_group, 3, 3])).unwrap();
        let p = ConvolutionParams { groups, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![1, 1], post_padding: vec![1, 1] };
        let conv = net.add_layer("conv", LayerKind::Convolution(p), vec![Some(x), Some(w)]).unwrap();
        net.mark_output(net.output(conv, 0)).unwrap();
        let prepared = prepare(cuda, &net, true);
        let ctx = prepared.create_execution_context();
        assert!(ctx.set_graph_capture(true), "cuda captures graphs");
        let oracle = kiln_cpu::CpuBackend::new().prepare(&net).unwrap();
        for step in 0..4 {
            let feeds = [random(&mut r, DataType::F16, &[2, c, 9, 9]), random(&mut r, DataType::F16, &[k, cin_per_group, 3, 3])];
            let inputs: HashMap<String, HostTensor> = [("x".to_string(), feeds[0].clone()), ("w".to_string(), feeds[1].clone())].into();
            let got = run(&ctx, &inputs);
            let want = oracle.execute(&feeds).unwrap();
            let err = worst_error(got.values().next().expect("one output"), &want[0]);
            assert!(err < 2e-2, "groups {groups}, run {step} ({}): {err} from the cpu oracle", mode(&ctx));
        }
        // The dense filter's runs replay one graph. A grouped filter given as an input still
        // falls back to interpreted runs (its capture run allocates where the recording run did
        // not), correct but without a graph: printed, not hidden.
        if groups == 1 {
            assert_eq!(mode(&ctx), "graph replay", "groups {groups}");
        } else {
            eprintln!("groups {groups}: {}", mode(&ctx));
        }
    }
}
