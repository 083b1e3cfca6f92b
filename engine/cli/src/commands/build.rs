//! `kiln build MODEL.onnx -o ENGINE`: import, build for a backend, write the engine file.

use crate::backends;
use crate::commands::run::build_engine;
use crate::model;
use crate::summary::{self, emit};
use crate::BuildArgs;
use anyhow::{bail, Context};
use std::time::Instant;

pub fn build(args: &BuildArgs) -> anyhow::Result<()> {
    let bytes = model::read_model_file(&args.model)?;
    if model::is_engine_file(&bytes) {
        bail!("`{}` is already a kiln engine file; `kiln build` takes an ONNX model", args.model.display());
    }
    let start = Instant::now();
    let network = model::import_onnx(&args.model, &bytes)?;
    let import_time = start.elapsed();
    let backend = backends::select(args.backend)?;
    let start = Instant::now();
    let engine = build_engine(&network, &backend)?;
    let build_time = start.elapsed();
    let engine_file = engine.serialize();
    std::fs::write(&args.output, &engine_file)
        .with_context(|| format!("cannot write engine file `{}`", args.output.display()))?;

    emit(&format!(
        "model:    {}\nbackend:  {}\ndevice:   {}\nlayers:   {}\nweights:  {}\nengine:   {} written to `{}`\nimport:   {}\nbuild:    {}\n",
        args.model.display(),
        backend.describe(),
        backend.device.name,
        engine.network().layers().len(),
        summary::byte_size(engine.weights_bytes()),
        summary::byte_size(engine_file.len()),
        args.output.display(),
        summary::duration(import_time),
        summary::duration(build_time),
    ))
}
