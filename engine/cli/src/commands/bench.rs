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
//! `kiln::runtime::layer_profile`) and report each layer's median and share. `--streams N`
//! runs N contexts of the engine at once, each on its own stream and thread: the throughput
//! is theirs together. `--no-data-transfers` binds device memory, filled once, to every input
//! and output, so the iterations copy nothing between host and device.

use crate::backends::{self, SelectedBackend};
use crate::commands::run::build_engine;
use crate::inputs;
use crate::progress;
use crate::model::{self, Model};
use crate::stats::Summary;
use crate::output_file;
use crate::summary::{self, emit};
use crate::{shapes, BenchArgs};
use anyhow::{bail, Context};
use kiln::runtime::layer_profile::LayerProfile;
use kiln::{Buffer, BuilderConfig, DeviceAllocation, DeviceTimes, ExecutionContext, HostTensor, Stream};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// Per-iteration host measurements of the timed phase.
struct Timings {
    latency: Vec<f64>,
    enqueue: Vec<f64>,
    /// Per timed iteration, the backend's device times (empty where it measures none).
    device: Vec<DeviceTimes>,
    wall: Duration,
    warmup_iterations: u64,
    /// The untimed first run that checks the inputs and sizes the outputs.
    first_run: Duration,
}

pub fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if Duration::try_from_secs_f64(args.duration_s).is_err() {
        bail!("--duration-s must be a non-negative number of seconds that a clock can count, got {}", args.duration_s);
    }
    if args.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    if !(1..=MAX_STREAMS).contains(&args.streams) {
        bail!("--streams must be between 1 and {MAX_STREAMS}, got {}", args.streams);
    }
    let (engine, backend, inputs, input_source, build_time) = match model::load(&args.model)? {
        Model::Onnx { network, .. } => {
            let network = args.precision.network_to_build(network)?;
            let (inputs, source) = inputs::make(&args.input, &network, None)?;
            let backend = backends::select(args.backend)?;
            let config = BuilderConfig {
                profiles: shapes::exact_profile(&network, &inputs).into_iter().collect(),
                ..builder_config(args)?
            };
            let start = Instant::now();
            let engine = build_engine(&network, &backend, &config)?;
            (engine, backend, inputs, source, Some(start.elapsed()))
        }
        Model::Engine { engine, .. } => {
            args.precision.refuse_for_engine(&args.model, &engine.build_flags().builder_flags.names())?;
            let (inputs, source) = inputs::make(&args.input, engine.network(), engine.profiles().first())?;
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
    let (first_run, output_bytes) = bind(&mut context, &inputs)?;
    let mut contexts = vec![context];
    for _ in 1..args.streams {
        let mut more = contexts[0].prepared_engine().create_execution_context();
        more.set_device_timing(true);
        bind(&mut more, &inputs)?;
        contexts.push(more);
    }
    // Lives as long as the contexts run on it.
    let mut _device_memory = Vec::new();
    if let Some(memory) = args.io_memory() {
        for context in &mut contexts {
            _device_memory.extend(bind_device(context, &inputs, &output_bytes, memory).with_context(|| {
                format!("{} keeps the inputs and outputs in {memory} (a cuda engine; backend `{}` was chosen)", args.io_flag(), backend.name())
            })?);
        }
    }
    let mut timings = time_iterations(&contexts, args)?;
    let context = &contexts[0];
    timings.first_run = first_run;
    let execution = Execution { captures_graphs, mode: context.execution_mode() };
    let shapes = input_shapes(context.engine().network(), &inputs);
    let mut report = Report::new(args, &backend, &flags, (&input_source, &shapes), build_time, batch, &timings, &execution);
    if let Some(path) = &args.export_times {
        crate::summary::write_json(path, &iteration_times(&timings))?;
    }
    if args.dump_profile || args.export_profile.is_some() {
        let profile = profile_layers(context, &inputs, args.profile_runs)
            .with_context(|| format!("cannot profile the layers on `{}`", backend.name()))?;
        if args.dump_profile {
            report.text.push('\n');
            report.text.push_str(&profile.to_text());
        }
        let json = profile.to_json();
        if let Some(path) = &args.export_profile {
            crate::summary::write_json(path, &json)?;
        }
        report.json["profile"] = json;
    }
    if let Some(path) = &args.json {
        crate::summary::write_json(path, &report.json)?;
    }
    let to_stdout = [&args.json, &args.export_times, &args.export_profile].into_iter().flatten().any(|p| output_file::is_stdout(p));
    if to_stdout {
        return Ok(());
    }
    emit(&report.text)
}

/// Each input's name and type (`f32[1,3,224,224]`), in network order.
fn input_shapes(network: &kiln::Network, inputs: &HashMap<String, HostTensor>) -> Vec<(String, String)> {
    network
        .inputs()
        .iter()
        .filter_map(|&t| inputs.get_key_value(&network.tensor(t).name))
        .map(|(name, tensor)| (name.clone(), summary::host_tensor_type(tensor)))
        .collect()
}

/// `--export-times`: one object per timed iteration, in order (trtexec's `--exportTimes`).
fn iteration_times(t: &Timings) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let per_iteration: Vec<Value> = t
        .latency
        .iter()
        .zip(&t.enqueue)
        .enumerate()
        .map(|(i, (latency, enqueue))| {
            let mut item = json!({ "iteration": i, "latency_ms": latency * 1e3, "enqueue_ms": enqueue * 1e3 });
            // Device times exist for every iteration or for none.
            if let Some(d) = t.device.get(i).filter(|_| t.device.len() == t.latency.len()) {
                item["gpu_compute_ms"] = json!(ms(d.compute));
                item["h2d_ms"] = json!(ms(d.host_to_device));
                item["d2h_ms"] = json!(ms(d.device_to_host));
            }
            item
        })
        .collect();
    Value::Array(per_iteration)
}

fn builder_config(args: &BenchArgs) -> anyhow::Result<BuilderConfig> {
    let mut config = BuilderConfig { max_memory_bytes: args.max_memory, ..BuilderConfig::default() };
    args.precision.apply(&mut config)?;
    Ok(config)
}

/// The first input's dim 0 when the input has a batch dim to speak of (rank 2 or more).
fn batch_of(context: &ExecutionContext, inputs: &HashMap<String, HostTensor>) -> Option<(String, usize)> {
    let network = context.engine().network();
    let first = network.tensor(*network.inputs().first()?);
    let shape = inputs.get(&first.name)?.shape();
    (shape.len() >= 2).then(|| (first.name.clone(), shape[0]))
}

/// Sets the input shapes and binds a buffer to every input and output. One synchronous
/// run first checks the inputs and gives the output sizes; returns how long it took and the
/// outputs' sizes in bytes.
fn bind(context: &mut ExecutionContext, inputs: &HashMap<String, HostTensor>) -> anyhow::Result<(Duration, Vec<(String, usize)>)> {
    let spinner = progress::spinner("first run (untimed: checks the inputs, sizes the outputs)");
    let start = Instant::now();
    let outputs = context.run(inputs);
    let first_run = start.elapsed();
    spinner.finish_and_clear();
    let outputs = outputs.context("the first run failed")?;
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
    Ok((first_run, outputs.iter().map(|(name, t)| (name.clone(), t.size_bytes())).collect()))
}

/// `--no-data-transfers`: binds device memory to every input (filled with its values once)
/// and output (`output_bytes` each) instead of host buffers; shape tensors keep their values.
fn bind_device(
    context: &mut ExecutionContext,
    inputs: &HashMap<String, HostTensor>,
    output_bytes: &[(String, usize)],
    memory_kind: IoMemory,
) -> anyhow::Result<Vec<Box<dyn DeviceAllocation>>> {
    let prepared = context.prepared_engine().clone();
    let allocate = |bytes: usize| match memory_kind {
        IoMemory::Device => prepared.allocate_device(bytes),
        IoMemory::PinnedHost => prepared.allocate_host(bytes),
    };
    let mut memory = Vec::new();
    let network = prepared.engine().network();
    for &t in network.inputs() {
        let name = &network.tensor(t).name;
        let Some(tensor) = inputs.get(name) else { bail!("input `{name}` is missing") };
        let bytes = tensor.data().to_le_bytes();
        let allocation = allocate(bytes.len())?;
        allocation.write(&bytes)?;
        context.set_device_tensor_address(name, allocation.pointer())?;
        memory.push(allocation);
    }
    for (name, bytes) in output_bytes {
        let allocation = allocate(*bytes)?;
        context.set_device_tensor_address(name, allocation.pointer())?;
        memory.push(allocation);
    }
    Ok(memory)
}

/// Where `--no-data-transfers` and `--pinned-host-io` keep the inputs and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IoMemory {
    Device,
    PinnedHost,
}

impl std::fmt::Display for IoMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoMemory::Device => "device memory",
            IoMemory::PinnedHost => "page-locked host memory",
        })
    }
}

impl BenchArgs {
    fn io_memory(&self) -> Option<IoMemory> {
        match (self.no_data_transfers, self.pinned_host_io) {
            (true, _) => Some(IoMemory::Device),
            (false, true) => Some(IoMemory::PinnedHost),
            (false, false) => None,
        }
    }

    fn io_flag(&self) -> &'static str {
        if self.no_data_transfers {
            "--no-data-transfers"
        } else {
            "--pinned-host-io"
        }
    }
}

/// Most `--streams`: far more than a device overlaps, few enough that a typo is not a
/// thousand threads.
const MAX_STREAMS: usize = 64;

/// Warms every context up, then runs them at once, each on its own stream and thread, until
/// together they reach `--iterations` and `--duration-s` has passed.
fn time_iterations(contexts: &[ExecutionContext], args: &BenchArgs) -> anyhow::Result<Timings> {
    let warmup = Duration::from_millis(args.warmup_ms);
    // Checked in `bench`; a value that cannot convert would have been refused there.
    let duration = Duration::try_from_secs_f64(args.duration_s).unwrap_or(Duration::MAX);
    let spinner = progress::spinner(format!("warming up for {} ms", args.warmup_ms));
    let done = AtomicU64::new(0);
    let warmup_iterations = AtomicU64::new(0);
    let barrier = Barrier::new(contexts.len());
    let start = OnceLock::new();
    let per_stream: Vec<anyhow::Result<Timings>> = std::thread::scope(|scope| {
        let handles: Vec<_> = contexts
            .iter()
            .enumerate()
            .map(|(i, context)| {
                let (done, warmups, barrier, start, spinner) = (&done, &warmup_iterations, &barrier, &start, &spinner);
                scope.spawn(move || -> anyhow::Result<Timings> {
                    let stream = Stream::new()?;
                    let once = || -> anyhow::Result<(f64, f64, Option<DeviceTimes>)> {
                        let begin = Instant::now();
                        if args.io_memory().is_some() {
                            // Returns once the execution is complete (no caller stream).
                            context.enqueue_on_device(None)?;
                        } else {
                            context.enqueue(&stream, None)?;
                        }
                        let enqueued = begin.elapsed();
                        stream.synchronize()?;
                        Ok((begin.elapsed().as_secs_f64(), enqueued.as_secs_f64(), context.last_device_times()))
                    };
                    let warm = Instant::now();
                    while warm.elapsed() < warmup {
                        once()?;
                        warmups.fetch_add(1, Ordering::Relaxed);
                    }
                    barrier.wait();
                    let start = *start.get_or_init(Instant::now);
                    if i == 0 {
                        spinner.set_message("timing");
                    }
                    let (mut latency, mut enqueue, mut device) = (Vec::new(), Vec::new(), Vec::new());
                    while done.load(Ordering::Relaxed) < args.iterations || start.elapsed() < duration {
                        let (l, e, d) = once()?;
                        latency.push(l);
                        enqueue.push(e);
                        device.extend(d);
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if i == 0 && n % 16 == 0 {
                            spinner.set_message(format!("timing: {n} iterations"));
                        }
                    }
                    Ok(Timings { latency, enqueue, device, wall: start.elapsed(), warmup_iterations: 0, first_run: Duration::ZERO })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a timing thread panicked")))).collect()
    });
    spinner.finish_and_clear();
    let mut all = Timings {
        latency: Vec::new(),
        enqueue: Vec::new(),
        device: Vec::new(),
        wall: Duration::ZERO,
        warmup_iterations: warmup_iterations.load(Ordering::Relaxed),
        first_run: Duration::ZERO,
    };
    for t in per_stream {
        let t = t?;
        all.latency.extend(t.latency);
        all.enqueue.extend(t.enqueue);
        all.device.extend(t.device);
        all.wall = all.wall.max(t.wall);
    }
    Ok(all)
}

/// The per-layer profile over `runs` profile runs (after one untimed one), kept apart from
/// the timed iterations as trtexec's `--separateProfileRun` keeps them.
fn profile_layers(context: &ExecutionContext, inputs: &HashMap<String, HostTensor>, runs: usize) -> anyhow::Result<LayerProfile> {
    if runs == 0 {
        bail!("--profile-runs must be at least 1");
    }
    let mut times = Vec::with_capacity(runs);
    let bar = progress::counter("profiling layers", runs as u64 + 1, "runs");
    for i in 0..=runs {
        let Some(t) = context.profile_layers(inputs)? else {
            bail!("the backend does not time individual layers");
        };
        if i > 0 {
            times.push(t);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
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
        (input_source, input_shapes): (&str, &[(String, String)]),
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
        let shapes_text: Vec<String> = input_shapes.iter().map(|(name, t)| format!("{name} {t}")).collect();
        let _ = writeln!(text, "inputs:      {} ({input_source})", shapes_text.join(", "));
        if let Some(b) = build_time {
            let _ = writeln!(text, "build:       {}", summary::duration(b));
        }
        let _ = writeln!(text, "first run:   {} (untimed: checks the inputs, sizes the outputs)", summary::duration(t.first_run));
        let _ = writeln!(text, "warm-up:     {} ms, {} iterations", args.warmup_ms, t.warmup_iterations);
        let _ = writeln!(text, "timed:       {iterations} iterations in {:.3} s", wall);
        if args.streams > 1 {
            let _ = writeln!(text, "streams:     {} contexts at once, each on its own stream and thread (throughput is theirs together)", args.streams);
        }
        let io_note = match args.io_memory() {
            Some(IoMemory::Device) => "device memory, filled once (--no-data-transfers): no host copies are timed; H2D / D2H are device-to-device copies",
            Some(IoMemory::PinnedHost) => "page-locked host memory, filled once (--pinned-host-io): H2D / D2H are one DMA each way, no staging copy",
            None => "host buffers: every iteration copies inputs to and outputs from the device",
        };
        let _ = writeln!(text, "I/O:         {io_note}");
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
            "first_run_s": t.first_run.as_secs_f64(),
            "input_shapes": input_shapes.iter().map(|(name, t)| (name.clone(), Value::from(t.as_str()))).collect::<serde_json::Map<_, _>>(),
            "warmup": { "ms": args.warmup_ms, "iterations": t.warmup_iterations },
            "iterations": iterations,
            "streams": args.streams,
            "no_data_transfers": args.no_data_transfers,
            "pinned_host_io": args.pinned_host_io,
            "io_note": io_note,
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
            "{:<12} min {:.4} / mean {:.4} (sd {:.4}) / median {:.4} / p90 {:.4} / p95 {:.4} / p99 {:.4} / max {:.4} ms",
            format!("{label}:"),
            s.min,
            s.mean,
            s.stddev,
            s.median,
            s.p90,
            s.p95,
            s.p99,
            s.max
        );
    }
}
