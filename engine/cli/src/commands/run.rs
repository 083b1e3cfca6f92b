//! `kiln run MODEL`: import or load, build when needed, run once, summarize.

use crate::backends::{self, SelectedBackend};
use crate::model::{self, Model};
use crate::summary::{self, emit};
use crate::{inputs, npz, shapes, RunArgs};
use anyhow::Context;
use kiln::{Builder, BuilderConfig, Engine, ExecutionContext, HostTensor, Network};
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
            let (inputs, input_source) = make_inputs(&input_args(args), &network, None)?;
            let backend = backends::select(args.backend)?;
            let start = Instant::now();
            // Dynamic inputs: a profile fixed at the shapes this run uses.
            let config = BuilderConfig {
                profiles: shapes::exact_profile(&network, &inputs).into_iter().collect(),
                max_memory_bytes: args.max_memory,
                ..BuilderConfig::default()
            };
            let engine = build_engine(&network, &backend, &config)?;
            (engine, backend, Origin::Onnx { import_time, build_time: start.elapsed() }, inputs, input_source)
        }
        Model::Engine { engine, load_time } => {
            let mut engine = *engine;
            if args.max_memory.is_some() {
                engine.set_max_memory_bytes(args.max_memory);
            }
            let (inputs, input_source) = make_inputs(&input_args(args), engine.network(), engine.profiles().first())?;
            let backend = backends::select_for_engine(&engine, args.backend)?;
            (engine, backend, Origin::EngineFile { load_time }, inputs, input_source)
        }
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

/// Where a command's inputs come from: `--inputs IN.npz` and `--shapes`.
pub struct InputArgs<'a> {
    pub inputs: Option<&'a std::path::Path>,
    pub shapes: Option<&'a str>,
}

fn input_args(args: &RunArgs) -> InputArgs<'_> {
    InputArgs { inputs: args.inputs.as_deref(), shapes: args.shapes.as_deref() }
}

/// The run's inputs (from `--inputs` or random) and where they came from. Dynamic dims
/// come from `--shapes`, else (random inputs of an engine) from its first profile's opt
/// dims, else 1. Shared by `kiln compare` and `kiln bench`.
pub fn make_inputs(
    args: &InputArgs<'_>,
    network: &Network,
    profile: Option<&kiln::OptimizationProfile>,
) -> anyhow::Result<(HashMap<String, HostTensor>, String)> {
    let given = match args.shapes {
        Some(text) => shapes::parse("--shapes", text)?,
        None => shapes::ShapeList::new(),
    };
    shapes::check_against_network("--shapes", &given, network)?;
    match args.inputs {
        Some(path) => {
            let inputs = inputs::from_npz(network, path)?;
            shapes::check_against_inputs(&given, &inputs, &path.display().to_string())?;
            Ok((inputs, format!("from `{}`", path.display())))
        }
        None => {
            let mut dims = given;
            for (name, range) in profile.into_iter().flat_map(|p| p.dimension_ranges()) {
                dims.entry(name.to_string()).or_insert_with(|| range.opt.clone());
            }
            Ok((inputs::random(network, &dims)?, format!("random, ChaCha8 seed {}", inputs::RANDOM_SEED)))
        }
    }
}

/// Builds for one backend; shared with `kiln build`.
pub fn build_engine(network: &Network, backend: &SelectedBackend, config: &BuilderConfig) -> anyhow::Result<Engine> {
    Builder::new(backend.backend.as_ref())
        .build(network, config)
        .with_context(|| format!("cannot build an engine for `{}`", backend.name()))
}
