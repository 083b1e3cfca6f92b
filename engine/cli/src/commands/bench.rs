//! `kiln bench MODEL|ENGINE`: latency and throughput in the manner of trtexec.
//!
//! Each iteration enqueues one execution on a stream (inputs and outputs in bound
//! buffers) and waits for it: the latency is enqueue to completion, the enqueue time the
//! host-side part. A warm-up runs first for `--warmup-ms`; then iterations run until both
//! `--iterations` and `--duration-s` are reached. Backends that time executions on the
//! device (cuda: CUDA events around the input copies, the compute and the output copies)
//! report GPU compute, H2D and D2H times; `--no-cuda-graph` asks the backend to interpret
//! every execution instead of replaying a captured graph. `--dump-profile` and
//! `--export-profile` then time every layer in separate profile runs (see
//! `kiln::runtime::layer_profile`) and report each layer's median and share.

use crate::backends::{self, SelectedBackend};
use crate::commands::run::{build_engine, make_inputs, InputArgs};
use crate::model::{self, Model};
use crate::stats::Summary;
use crate::output_file;
use crate::summary::{self, emit};
use crate::{shapes, BenchArgs};
use anyhow::{bail, Context};
use kiln::runtime::layer_profile::LayerProfile;
use kiln::{Buffer, BuilderConfig, BuilderFlag, DeviceTimes, ExecutionContext, HostTensor, Stream};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// Per-iteration host measurements of the timed phase.
struct Timings {
    latency: Vec<f64>,
    enqueue: Vec<f64>,
    /// Per timed iteration, the backend's device times (empty where it measures none).
    device: Vec<DeviceTimes>,
    wall: Duration,
    warmup_iterations: u64,
}

pub fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if Duration::try_from_secs_f64(args.duration_s).is_err() {
        bail!("--duration-s must be a non-negative number of seconds that a clock can count, got {}", args.duration_s);
    }
    if args.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let input_args = InputArgs { inputs: args.inputs.as_deref(), shapes: args.shapes.as_deref() };
    let (engine, backend, inputs, input_source, build_time) = match model::load(&args.model)? {
        Model::Onnx { network, .. } => {
            let (inputs, source) = make_inputs(&input_args, &network, None)?;
            let backend = backends::select(args.backend)?;
            let config = BuilderConfig {
                profiles: shapes::exact_profile(&network, &inputs).into_iter().collect(),
                ..builder_config(args)
            };
            let start = Instant::now();
            let engine = build_engine(&network, &backend, &config)?;
            (engine, backend, inputs, source, Some(start.elapsed()))
        }
        Model::Engine { engine, .. } => {
            if args.fp16 || args.bf16 || args.no_tf32 {
                bail!(
                    "--fp16, --bf16 and --no-tf32 apply when building from ONNX; `{}` is an engine built with flags {}",
                    args.model.display(),
                    engine.build_flags().builder_flags.names()
                );
            }
            let (inputs, source) = make_inputs(&input_args, engine.network(), engine.profiles().first())?;
            let backend = backends::select_for_engine(&engine, args.backend)?;
            let mut engine = *engine;
            if args.max_memory.is_some() {
                engine.set_max_memory_bytes(args.max_memory);
            }
            (engine, backend, inputs, source, None)
        }
    };
    let flags = engine.build_flags().builder_flags.names();
    let mut context = ExecutionContext::new(engine, backend.backend.as_ref())
        .with_context(|| format!("cannot prepare the engine on `{}`", backend.name()))?;
    let batch = batch_of(&context, &inputs);
    let captures_graphs = context.set_graph_capture(!args.no_cuda_graph);
    context.set_device_timing(true);
    bind(&mut context, &inputs)?;
    let timings = time_iterations(&context, args)?;
    let execution = Execution { captures_graphs, mode: context.execution_mode() };
    let mut report = Report::new(args, &backend, &flags, &input_source, build_time, batch, &timings, &execution);
    if args.dump_profile || args.export_profile.is_some() {
        let profile = profile_layers(&context, &inputs, args.profile_runs)
            .with_context(|| format!("cannot profile the layers on `{}`", backend.name()))?;
        if args.dump_profile {
            report.text.push('\n');
            report.text.push_str(&profile.to_text());
        }
        let json = profile.to_json();
        if let Some(path) = &args.export_profile {
            let text = serde_json::to_string_pretty(&json)?;
            output_file::write_bytes(path, (text + "\n").as_bytes()).with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        report.json["profile"] = json;
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json)?;
        output_file::write_bytes(path, (text + "\n").as_bytes()).with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    emit(&report.text)
}

fn builder_config(args: &BenchArgs) -> BuilderConfig {
    let mut config = BuilderConfig { max_memory_bytes: args.max_memory, ..BuilderConfig::default() };
    if args.fp16 {
        config.set_flag(BuilderFlag::Fp16);
    }
    if args.bf16 {
        config.set_flag(BuilderFlag::Bf16);
    }
    if args.no_tf32 {
        config.clear_flag(BuilderFlag::Tf32);
    }
    config
}

/// The first input's dim 0 when the input has a batch dim to speak of (rank 2 or more).
fn batch_of(context: &ExecutionContext, inputs: &HashMap<String, HostTensor>) -> Option<(String, usize)> {
    let network = context.engine().network();
    let first = network.tensor(*network.inputs().first()?);
    let shape = inputs.get(&first.name)?.shape();
    (shape.len() >= 2).then(|| (first.name.clone(), shape[0]))
}

/// Sets the input shapes and binds a buffer to every input and output. One synchronous
/// run first checks the inputs and gives the output sizes.
fn bind(context: &mut ExecutionContext, inputs: &HashMap<String, HostTensor>) -> anyhow::Result<()> {
    let outputs = context.run(inputs).context("the first run failed")?;
    let network = context.engine().network().clone();
    let profile = context.engine().profiles().first().cloned();
    for &t in network.inputs() {
        let name = &network.tensor(t).name;
        let Some(tensor) = inputs.get(name) else { bail!("input `{name}` is missing") };
        if profile.as_ref().is_some_and(|p| p.shape_values(name).is_some()) {
            let values = tensor.to_i64_vec().with_context(|| format!("shape tensor `{name}` is not integer"))?;
            context.set_shape_tensor_values(name, &values)?;
        }
        context.set_input_shape(name, tensor.shape())?;
        context.set_tensor_address(name, Buffer::from_tensor(tensor))?;
    }
    for (name, tensor) in &outputs {
        context.set_tensor_address(name, Buffer::new(tensor.size_bytes()))?;
    }
    Ok(())
}

fn time_iterations(context: &ExecutionContext, args: &BenchArgs) -> anyhow::Result<Timings> {
    let stream = Stream::new()?;
    let once = || -> anyhow::Result<(f64, f64, Option<DeviceTimes>)> {
        let start = Instant::now();
        context.enqueue(&stream, None)?;
        let enqueued = start.elapsed();
        stream.synchronize()?;
        Ok((start.elapsed().as_secs_f64(), enqueued.as_secs_f64(), context.last_device_times()))
    };
    let warmup = Duration::from_millis(args.warmup_ms);
    let start = Instant::now();
    let mut warmup_iterations = 0;
    while start.elapsed() < warmup {
        once()?;
        warmup_iterations += 1;
    }
    // Checked in `bench`; a value that cannot convert would have been refused there.
    let duration = Duration::try_from_secs_f64(args.duration_s).unwrap_or(Duration::MAX);
    let (mut latency, mut enqueue, mut device) = (Vec::new(), Vec::new(), Vec::new());
    let start = Instant::now();
    while (latency.len() as u64) < args.iterations || start.elapsed() < duration {
        let (l, e, d) = once()?;
        latency.push(l);
        enqueue.push(e);
        device.extend(d);
    }
    Ok(Timings { latency, enqueue, device, wall: start.elapsed(), warmup_iterations })
}

/// The per-layer profile over `runs` profile runs (after one untimed one), kept apart from
/// the timed iterations as trtexec's `--separateProfileRun` keeps them.
fn profile_layers(context: &ExecutionContext, inputs: &HashMap<String, HostTensor>, runs: usize) -> anyhow::Result<LayerProfile> {
    if runs == 0 {
        bail!("--profile-runs must be at least 1");
    }
    let mut times = Vec::with_capacity(runs);
    for i in 0..=runs {
        let Some(t) = context.profile_layers(inputs)? else {
            bail!("the backend does not time individual layers");
        };
        if i > 0 {
            times.push(t);
        }
    }
    Ok(LayerProfile::summarize(context.engine(), &times))
}

/// What the backend says about how it ran the engine.
struct Execution {
    /// Whether the backend captures graphs at all.
    captures_graphs: bool,
    /// How the last timed execution ran (e.g. "graph replay").
    mode: Option<String>,
}

/// Summaries (ms) of each device phase over the timed iterations.
fn device_summaries(device: &[DeviceTimes]) -> [Option<Summary>; 3] {
    let ms = |f: fn(&DeviceTimes) -> Duration| Summary::of(device.iter().map(|d| f(d).as_secs_f64() * 1e3).collect());
    [ms(|d| d.compute), ms(|d| d.host_to_device), ms(|d| d.device_to_host)]
}

/// The figures as text and as JSON.
struct Report {
    text: String,
    json: Value,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    fn new(
        args: &BenchArgs,
        backend: &SelectedBackend,
        flags: &str,
        input_source: &str,
        build_time: Option<Duration>,
        batch: Option<(String, usize)>,
        t: &Timings,
        execution: &Execution,
    ) -> Report {
        let ms = |sample: &[f64]| Summary::of(sample.to_vec()).map(|s| s.scaled(1e3));
        let (latency, enqueue) = (ms(&t.latency), ms(&t.enqueue));
        let iterations = t.latency.len();
        let wall = t.wall.as_secs_f64();
        let throughput = if wall > 0.0 { iterations as f64 / wall } else { 0.0 };
        let items = batch.as_ref().map(|(_, n)| throughput * *n as f64);
        let [compute, h2d, d2h] = device_summaries(&t.device);
        let device_note = if t.device.is_empty() {
            format!("n/a (backend `{}` reports no device timings)", backend.name())
        } else {
            format!("CUDA events around each phase, {} iterations", t.device.len())
        };
        let mode = execution.mode.as_deref().unwrap_or("not reported");
        let graph_note = match (execution.captures_graphs, args.no_cuda_graph) {
            (true, true) => format!("off (--no-cuda-graph); last run: {mode}"),
            (true, false) => format!("on; last run: {mode}"),
            (false, true) => format!("n/a: --no-cuda-graph has no effect on backend `{}` (no graph capture)", backend.name()),
            (false, false) => format!("n/a (backend `{}` has no graph capture)", backend.name()),
        };

        let mut text = String::new();
        let _ = writeln!(text, "model:       {}", args.model.display());
        let _ = writeln!(text, "backend:     {}", backend.describe());
        let _ = writeln!(text, "device:      {}", backend.device.name);
        let _ = writeln!(text, "flags:       {flags}");
        let _ = writeln!(text, "inputs:      {input_source}");
        if let Some(b) = build_time {
            let _ = writeln!(text, "build:       {}", summary::duration(b));
        }
        let _ = writeln!(text, "warm-up:     {} ms, {} iterations", args.warmup_ms, t.warmup_iterations);
        let _ = writeln!(text, "timed:       {iterations} iterations in {:.3} s", wall);
        write_ms(&mut text, "latency", latency);
        write_ms(&mut text, "enqueue", enqueue);
        let _ = writeln!(text, "throughput:  {throughput:.2} inferences/s");
        if let (Some((name, n)), Some(items)) = (&batch, items) {
            let _ = writeln!(text, "             {items:.2} items/s (batch {n}: dim 0 of input `{name}`)");
        }
        if t.device.is_empty() {
            let _ = writeln!(text, "GPU compute: {device_note}");
            let _ = writeln!(text, "H2D / D2H:   {device_note}");
        } else {
            write_ms(&mut text, "GPU compute", compute);
            write_ms(&mut text, "H2D", h2d);
            write_ms(&mut text, "D2H", d2h);
        }
        let _ = writeln!(text, "CUDA graph:  {graph_note}");

        let json = json!({
            "model": args.model.display().to_string(),
            "backend": backend.name(),
            "device": backend.device.name,
            "flags": flags,
            "inputs": input_source,
            "build_s": build_time.map(|d| d.as_secs_f64()),
            "warmup": { "ms": args.warmup_ms, "iterations": t.warmup_iterations },
            "iterations": iterations,
            "duration_s": wall,
            "latency_ms": latency.map(Summary::to_json),
            "enqueue_ms": enqueue.map(Summary::to_json),
            "throughput": {
                "inferences_per_s": throughput,
                "batch": batch.as_ref().map(|(_, n)| *n),
                "items_per_s": items,
            },
            "gpu_compute_ms": compute.map(Summary::to_json),
            "h2d_ms": h2d.map(Summary::to_json),
            "d2h_ms": d2h.map(Summary::to_json),
            "device_timings_note": device_note,
            "cuda_graph": {
                "requested": !args.no_cuda_graph,
                "supported": execution.captures_graphs,
                "last_run": execution.mode,
                "note": graph_note,
            },
        });
        Report { text, json }
    }
}

fn write_ms(text: &mut String, label: &str, summary: Option<Summary>) {
    if let Some(s) = summary {
        let _ = writeln!(
            text,
            "{:<12} min {:.4} / mean {:.4} / median {:.4} / p90 {:.4} / p95 {:.4} / p99 {:.4} / max {:.4} ms",
            format!("{label}:"),
            s.min,
            s.mean,
            s.median,
            s.p90,
            s.p95,
            s.p99,
            s.max
        );
    }
}
