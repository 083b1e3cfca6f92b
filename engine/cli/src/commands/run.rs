//! `kiln run MODEL`: import or load, build when needed, run once, summarize.

use crate::backends::{self, SelectedBackend};
use crate::model::{self, Model};
use crate::progress;
use crate::summary::{self, emit};
use crate::{inputs, npz, shapes, RunArgs};
use anyhow::Context;
use crate::output_file;
use kiln::{BuilderConfig, Engine, ExecutionContext, HostTensor, Network};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How the engine came to be, for the summary.
enum Origin {
    Onnx { import_time: Duration, build_time: Duration },
    EngineFile { load_time: Duration },
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let (engine, backend, origin, inputs, input_source) = match model::load(&args.model)? {
        Model::Onnx { network, import_time } => {
            let network = args.precision.network_to_build(network)?;
            let (inputs, input_source) = inputs::make(&args.input, &network, None)?;
            let backend = backends::select(args.backend)?;
            let start = Instant::now();
            // Dynamic inputs: a profile fixed at the shapes this run uses.
            let mut config = BuilderConfig {
                profiles: shapes::exact_profile(&network, &inputs).into_iter().collect(),
                max_memory_bytes: args.max_memory,
                ..BuilderConfig::default()
            };
            args.precision.apply(&mut config)?;
            let engine = build_engine(&network, &backend, &config)?;
            (engine, backend, Origin::Onnx { import_time, build_time: start.elapsed() }, inputs, input_source)
        }
        Model::Engine { engine, load_time } => {
            args.precision.refuse_for_engine(&args.model, &engine.build_flags().builder_flags.names())?;
            let mut engine = *engine;
            if args.max_memory.is_some() {
                engine.set_max_memory_bytes(args.max_memory);
            }
            let (inputs, input_source) = inputs::make(&args.input, engine.network(), engine.profiles().first())?;
            let backend = backends::select_for_engine(&engine, args.backend)?;
            (engine, backend, Origin::EngineFile { load_time }, inputs, input_source)
        }
    };
    let context = ExecutionContext::new(engine, backend.backend.as_ref())
        .with_context(|| format!("cannot prepare the engine on `{}`", backend.name()))?;
    let spinner = progress::spinner(format!("running on {}", backend.name()));
    let start = Instant::now();
    let outputs = context.run(&inputs);
    let run_time = start.elapsed();
    spinner.finish_and_clear();
    let outputs = outputs?;
    let network = context.engine().network();
    // Network order, not the map's alphabetical order.
    let outputs: Vec<(&str, &kiln::HostTensor)> = network
        .outputs()
        .iter()
        .filter_map(|&t| outputs.get_key_value(&network.tensor(t).name))
        .map(|(name, tensor)| (name.as_str(), tensor))
        .collect();
    if let Some(path) = &args.save_outputs {
        npz::write_npz(path, outputs.iter().copied())?;
    }

    if let Some(path) = &args.json {
        let report = run_json(args, &backend, &context, &inputs, &input_source, &outputs, &origin, run_time);
        crate::summary::write_json(path, &report)?;
        if output_file::is_stdout(path) {
            return Ok(());
        }
    }
    let mut text = String::new();
    let _ = writeln!(text, "model:    {}", args.model.display());
    let _ = writeln!(text, "backend:  {}", backend.describe());
    let _ = writeln!(text, "device:   {}", backend.device.name);
    for warning in context.warnings() {
        let _ = writeln!(text, "warning:  {warning}");
    }
    for &t in network.inputs() {
        let name = &network.tensor(t).name;
        if let Some(tensor) = inputs.get(name) {
            let _ = writeln!(text, "input     `{name}`: {} ({input_source})", summary::host_tensor_type(tensor));
        }
    }
    for (name, tensor) in outputs {
        let _ =
            writeln!(text, "output    `{name}`: {} {}", summary::host_tensor_type(tensor), summary::preview(tensor));
    }
    match origin {
        Origin::Onnx { import_time, build_time } => {
            let _ = writeln!(text, "import:   {}", summary::duration(import_time));
            let _ = writeln!(text, "build:    {}", summary::duration(build_time));
        }
        Origin::EngineFile { load_time } => {
            let _ = writeln!(text, "build:    none (engine file, loaded in {})", summary::duration(load_time));
        }
    }
    let _ = writeln!(text, "run:      {}", summary::duration(run_time));
    if let Some(path) = &args.save_outputs {
        let _ = writeln!(text, "saved:    outputs to `{}`", path.display());
    }
    emit(&text)
}

/// The run's report as JSON: what `kiln run` prints, with each output's statistics.
#[allow(clippy::too_many_arguments)]
fn run_json(
    args: &RunArgs,
    backend: &SelectedBackend,
    context: &ExecutionContext,
    inputs: &HashMap<String, HostTensor>,
    input_source: &str,
    outputs: &[(&str, &HostTensor)],
    origin: &Origin,
    run_time: Duration,
) -> Value {
    let network = context.engine().network();
    let inputs: Vec<Value> = network
        .inputs()
        .iter()
        .filter_map(|&t| inputs.get_key_value(&network.tensor(t).name))
        .map(|(name, tensor)| json!({ "name": name, "type": summary::host_tensor_type(tensor), "source": input_source }))
        .collect();
    let outputs: Vec<Value> = outputs.iter().map(|(name, tensor)| output_json(name, tensor)).collect();
    let (import_s, build_s, load_s) = match origin {
        Origin::Onnx { import_time, build_time } => (Some(import_time.as_secs_f64()), Some(build_time.as_secs_f64()), None),
        Origin::EngineFile { load_time } => (None, None, Some(load_time.as_secs_f64())),
    };
    json!({
        "model": args.model.display().to_string(),
        "backend": backend.name(),
        "device": backend.device.name,
        "warnings": context.warnings(),
        "inputs": inputs,
        "outputs": outputs,
        "import_s": import_s,
        "build_s": build_s,
        "load_s": load_s,
        "run_s": run_time.as_secs_f64(),
        "saved_outputs": args.save_outputs.as_ref().map(|p| p.display().to_string()),
    })
}

/// An output's name, type and, for numbers, min, max, mean and NaN count over its finite
/// and non-finite elements (the values themselves go to `--save-outputs`).
fn output_json(name: &str, tensor: &HostTensor) -> Value {
    let mut item = json!({ "name": name, "type": summary::host_tensor_type(tensor) });
    if tensor.dtype() == kiln::DataType::String || tensor.len() == 0 {
        return item;
    }
    let values = tensor.to_f64_vec();
    let numbers: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    let finite = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    item["nan_count"] = json!(values.len() - numbers.len());
    if !numbers.is_empty() {
        item["min"] = finite(numbers.iter().copied().fold(f64::INFINITY, f64::min));
        item["max"] = finite(numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        item["mean"] = finite(numbers.iter().sum::<f64>() / numbers.len() as f64);
    }
    item
}

/// Builds for one backend, with progress; shared with `kiln bench`.
pub fn build_engine(network: &Network, backend: &SelectedBackend, config: &BuilderConfig) -> anyhow::Result<Engine> {
    Ok(crate::commands::build::build_with_progress(backend, network, config.clone())?.engine)
}
