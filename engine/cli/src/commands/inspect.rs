//! `kiln inspect ENGINE`: what an engine file holds, as text or as JSON. With
//! `--verbosity`, the engine inspector's information instead (seed §6.12). An ONNX model
//! is described by [`inspect_onnx`].
//!
//! JSON structure (stable; shapes are arrays whose dims are numbers, the dim's name for a
//! named dim, or -1 for an unknown one):
//! `{"kiln_version", "backend", "device": {…}, "build_flags": [..], "builder_flags": [..],
//!   "profiling_verbosity", "limits": {"max_trip_count", "max_memory_bytes" (null: the machine's)},
//!   "inputs": [{"name", "dtype", "shape"}], "outputs": [..],
//!   "layers": [{"name", "type", "inputs": [tensor or null], "outputs": [tensor], "parameters"}]}`

use crate::commands::inspect_onnx;
use crate::model;
use crate::summary::{self, emit};
use crate::{InspectArgs, InspectFormat};
use anyhow::{bail, Context};
use kiln::engine::format::read_file;
use kiln::{Dim, Engine, EngineInspector, LayerInformationFormat, LayerKind, Network, ProfilingVerbosity, TensorId};
use serde_json::{json, Value};
use std::fmt::Write;

pub fn inspect(args: &InspectArgs) -> anyhow::Result<()> {
    let bytes = model::read_model_file(&args.file)?;
    if !model::is_engine_file(&bytes) {
        let onnx = model::decode_onnx(&bytes).with_context(|| {
            format!(
                "`{}` is neither a kiln engine file (bad magic bytes) nor an ONNX model",
                args.file.display()
            )
        })?;
        if args.verbosity.is_some() {
            bail!("--verbosity describes engine files; `{}` is an ONNX model", args.file.display());
        }
        return inspect_onnx::inspect(&args.file, &onnx, args.format, args.backend);
    }
    if args.backend.is_some() {
        bail!("--backend checks an ONNX model; engine file `{}` records its backend", args.file.display());
    }
    let engine = model::load_engine(&args.file, &bytes)?;
    // The header was just validated by loading; it carries the writer's kiln version.
    let (header, _) =
        read_file(&bytes).with_context(|| format!("cannot load engine file `{}`", args.file.display()))?;
    if let Some(verbosity) = args.verbosity {
        return emit(&inspector_report(&engine, verbosity.kiln(), args.format));
    }
    let text = match args.format {
        InspectFormat::Text => text_report(&engine, &header.kiln_version, bytes.len()),
        InspectFormat::Json => {
            let mut text = serde_json::to_string_pretty(&json_report(&engine, &header.kiln_version))?;
            text.push('\n');
            text
        }
    };
    emit(&text)
}

/// The engine inspector's information; a verbosity above the engine's is capped, with a note.
fn inspector_report(engine: &Engine, verbosity: ProfilingVerbosity, format: InspectFormat) -> String {
    let mut inspector = EngineInspector::new(engine);
    if verbosity > inspector.verbosity() {
        eprintln!(
            "note: the engine was built with profiling verbosity {}; rebuild with `--profiling-verbosity {}` to see more",
            inspector.verbosity().name(),
            verbosity.name().replace('_', "-")
        );
    }
    inspector.limit_verbosity(verbosity);
    let format = match format {
        InspectFormat::Text => LayerInformationFormat::Text,
        InspectFormat::Json => LayerInformationFormat::Json,
    };
    let mut text = inspector.get_engine_information(format);
    if format == LayerInformationFormat::Json {
        text.push('\n');
    }
    text
}

fn json_report(engine: &Engine, kiln_version: &str) -> Value {
    let net = engine.network();
    let tensor = |t: TensorId| {
        let d = net.tensor(t);
        json!({ "name": d.name, "dtype": d.dtype.name(), "shape": d.shape.dims().iter().map(json_dim).collect::<Vec<_>>() })
    };
    let layers: Vec<Value> = net
        .layers()
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "type": l.kind.type_name(),
                "inputs": l.inputs.iter().map(|t| t.map_or(Value::Null, tensor)).collect::<Vec<_>>(),
                "outputs": l.outputs.iter().map(|&t| tensor(t)).collect::<Vec<_>>(),
                "parameters": parameters(net, &l.kind),
            })
        })
        .collect();
    json!({
        "kiln_version": kiln_version,
        "backend": engine.backend(),
        "device": serde_json::to_value(engine.device()).unwrap_or(Value::Null),
        "build_flags": engine.build_flags().flags,
        "builder_flags": engine.build_flags().builder_flags.flags().iter().map(|f| f.name()).collect::<Vec<_>>(),
        "profiling_verbosity": engine.build_flags().profiling_verbosity.name(),
        "limits": {
            "max_trip_count": engine.control_flow().max_trip_count,
            "max_memory_bytes": engine.control_flow().max_memory_bytes,
        },
        "inputs": net.inputs().iter().map(|&t| tensor(t)).collect::<Vec<_>>(),
        "outputs": net.outputs().iter().map(|&t| tensor(t)).collect::<Vec<_>>(),
        "layers": layers,
        "refit": refit_json(engine),
    })
}

/// `12 weights (8 stripped: refit before running)`, or why the engine cannot be refitted.
fn refit_text(engine: &kiln::Engine) -> String {
    let Ok(refitter) = kiln::refit::Refitter::new(engine) else {
        return "no (built without --flag refit)".into();
    };
    let (all, missing) = (refitter.get_all_weights().len(), refitter.get_missing_weights().len());
    if missing == 0 {
        format!("{all} refittable weights")
    } else {
        format!("{all} refittable weights, {missing} stripped: `kiln refit` gives them before the engine runs")
    }
}

/// `{"weights": [names], "missing": [names]}`, or null for an engine built without REFIT.
fn refit_json(engine: &kiln::Engine) -> Value {
    match kiln::refit::Refitter::new(engine) {
        Ok(r) => json!({"weights": r.get_all_weights(), "missing": r.get_missing_weights()}),
        Err(_) => Value::Null,
    }
}

fn json_dim(dim: &Dim) -> Value {
    match dim {
        Dim::Fixed(n) => json!(n),
        Dim::Named(name) => json!(name),
        Dim::Unknown => json!(-1),
    }
}

/// A layer's parameters as text: its debug form, or for a constant the weights it holds.
fn parameters(net: &Network, kind: &LayerKind) -> String {
    match kind {
        LayerKind::Constant { weights } => match net.weights_blob(*weights) {
            Some(blob) => format!("weights #{}: {}", weights.0, summary::host_tensor_type(blob)),
            None => format!("weights #{} (missing)", weights.0),
        },
        other => format!("{other:?}"),
    }
}

fn text_report(engine: &Engine, kiln_version: &str, file_size: usize) -> String {
    let net = engine.network();
    let device = engine.device();
    let tensor = |t: TensorId| {
        let d = net.tensor(t);
        format!("`{}`: {}", d.name, summary::tensor_type(d.dtype, &d.shape))
    };
    let flags = &engine.build_flags().flags;
    let mut s = String::new();
    let _ = writeln!(s, "kiln version: {kiln_version}");
    let _ = writeln!(s, "backend:      {}", engine.backend());
    let _ = writeln!(s, "device:       {}", device.name);
    if !device.compute_capability.is_empty() {
        let _ = writeln!(s, "capability:   {}", device.compute_capability);
    }
    let _ = writeln!(s, "build flags:  {}", if flags.is_empty() { "(none)".to_string() } else { flags.join(" ") });
    let _ = writeln!(s, "builder:      {}", engine.build_flags().builder_flags.names());
    let _ = writeln!(s, "profiling:    {}", engine.build_flags().profiling_verbosity.name());
    let control = engine.control_flow();
    let memory = control.max_memory_bytes.map_or("the machine's memory".to_string(), kiln::limits::format_bytes);
    let _ = writeln!(s, "limits:       {memory} per tensor, {} trips per loop", control.max_trip_count);
    let _ = writeln!(s, "file size:    {}", summary::byte_size(file_size));
    let _ = writeln!(s, "weights:      {}", summary::byte_size(engine.weights_bytes()));
    let _ = writeln!(s, "refit:        {}", refit_text(engine));
    let _ = writeln!(s, "inputs ({}):", net.inputs().len());
    for &t in net.inputs() {
        let _ = writeln!(s, "  {} {}", tensor(t), net.tensor(t).format.name());
    }
    let _ = writeln!(s, "outputs ({}):", net.outputs().len());
    for &t in net.outputs() {
        let _ = writeln!(s, "  {} {}", tensor(t), net.tensor(t).format.name());
    }
    let _ = writeln!(s, "layers ({}):", net.layers().len());
    for (i, l) in net.layers().iter().enumerate() {
        let inputs: Vec<String> = l.inputs.iter().map(|t| t.map_or("(absent)".to_string(), tensor)).collect();
        let outputs: Vec<String> = l.outputs.iter().map(|&t| tensor(t)).collect();
        let _ = writeln!(s, "  [{i}] `{}` {}", l.name, l.kind.type_name());
        if !inputs.is_empty() {
            let _ = writeln!(s, "      inputs:     {}", inputs.join(", "));
        }
        let _ = writeln!(s, "      outputs:    {}", outputs.join(", "));
        let _ = writeln!(s, "      parameters: {}", parameters(net, &l.kind));
    }
    s
}
