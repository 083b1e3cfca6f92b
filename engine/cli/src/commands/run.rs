//! `kiln run MODEL`: import or load, build when needed, run once, summarize.

use crate::backends::{self, SelectedBackend};
use crate::model::{self, Model};
use crate::summary::{self, emit};
use crate::{inputs, npz, RunArgs};
use anyhow::Context;
use kiln::{Builder, BuilderConfig, Engine, ExecutionContext};
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How the engine came to be, for the summary.
enum Origin {
    Onnx { import_time: Duration, build_time: Duration },
    EngineFile { load_time: Duration },
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let (engine, backend, origin) = match model::load(&args.model)? {
        Model::Onnx { network, import_time } => {
            let backend = backends::select(args.backend)?;
            let start = Instant::now();
            let engine = build_engine(&network, &backend)?;
            (engine, backend, Origin::Onnx { import_time, build_time: start.elapsed() })
        }
        Model::Engine { engine, load_time } => {
            let backend = backends::select_for_engine(&engine, args.backend)?;
            (*engine, backend, Origin::EngineFile { load_time })
        }
    };
    let (inputs, input_source) = match &args.inputs {
        Some(path) => (inputs::from_npz(engine.network(), path)?, format!("from `{}`", path.display())),
        None => (inputs::random(engine.network())?, format!("random, ChaCha8 seed {}", inputs::RANDOM_SEED)),
    };
    let context = ExecutionContext::new(engine, backend.backend.as_ref())
        .with_context(|| format!("cannot prepare the engine on `{}`", backend.name()))?;
    let start = Instant::now();
    let outputs = context.run(&inputs)?;
    let run_time = start.elapsed();
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

/// Builds with the default configuration; shared with `kiln build`.
pub fn build_engine(network: &kiln::Network, backend: &SelectedBackend) -> anyhow::Result<Engine> {
    Builder::new(backend.backend.as_ref())
        .build(network, &BuilderConfig::default())
        .with_context(|| format!("cannot build an engine for `{}`", backend.name()))
}
