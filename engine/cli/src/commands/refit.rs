//! `kiln refit ENGINE --weights MODEL.onnx|WEIGHTS.npz -o OUT`: new weights for an engine
//! built with `--flag refit`, or the weights a `--flag strip_weights` engine left out.

use crate::backends;
use crate::logging::Verbosity;
use crate::model;
use crate::npz;
use crate::output_file;
use crate::summary::{self, emit};
use crate::RefitArgs;
use anyhow::{bail, Context};
use kiln::refit::Refitter;
use std::time::Instant;

pub fn refit(args: &RefitArgs, verbosity: Verbosity) -> anyhow::Result<()> {
    let bytes = model::read_model_file(&args.engine)?;
    if !model::is_engine_file(&bytes) {
        bail!("`{}` is not a kiln engine file; `kiln refit` takes an engine built with --flag refit", args.engine.display());
    }
    let mut engine = model::load_engine(&args.engine, &bytes)?;
    let mut refitter = Refitter::new(&engine).with_context(|| format!("cannot refit `{}`", args.engine.display()))?;
    let start = Instant::now();
    let given = set_new_weights(args, &mut refitter).with_context(|| format!("weights file `{}`", args.weights.display()))?;
    let read_time = start.elapsed();
    let missing = refitter.get_missing_weights();
    if !missing.is_empty() {
        bail!(
            "`{}` lacks weights the stripped engine needs: {}",
            args.weights.display(),
            missing.join(", ")
        );
    }
    let backend = backends::select_for_engine(&engine, args.backend)?;
    let start = Instant::now();
    let changed = refitter
        .refit_engine(&mut engine, backend.backend.as_ref())
        .with_context(|| format!("cannot refit `{}`", args.engine.display()))?;
    let refit_time = start.elapsed();
    let file = engine.serialize();
    output_file::write_bytes(&args.output, &file)
        .with_context(|| format!("cannot write engine file `{}`", args.output.display()))?;
    if verbosity == Verbosity::Quiet {
        return Ok(());
    }
    emit(&format!(
        "engine:   `{}` ({})\nweights:  {given} of {} refittable weights from `{}`, read in {}\nrefit:    {changed} weights blobs of the engine changed, in {}\nengine:   {} written to `{}`\n",
        args.engine.display(),
        backend.describe(),
        refitter.get_all_weights().len(),
        args.weights.display(),
        summary::duration(read_time),
        summary::duration(refit_time),
        summary::byte_size(file.len()),
        args.output.display(),
    ))
}

/// Sets the new weights: an npz's arrays by name, or an ONNX model's float constants that
/// the engine has weights of the same name for (a model has more constants than weights).
fn set_new_weights(args: &RefitArgs, refitter: &mut Refitter) -> anyhow::Result<usize> {
    let bytes = model::read_model_file(&args.weights)?;
    // An npz is a zip archive; anything else is read as an ONNX model.
    if bytes.starts_with(b"PK") {
        let arrays = npz::read_npz_bytes(&bytes)?;
        for (name, tensor) in &arrays {
            refitter.set_named_weights(name, tensor.clone())?;
        }
        return Ok(arrays.len());
    }
    let network = model::import_onnx(&args.weights, &bytes)?;
    let set = refitter.set_weights_from_network(&network)?;
    let wanted = refitter.get_all_weights();
    if set == 0 && !wanted.is_empty() {
        bail!(
            "ONNX model `{}` has none of the engine's {} weights by name (e.g. `{}`): is it the model the engine was built from?",
            args.weights.display(),
            wanted.len(),
            wanted[0]
        );
    }
    Ok(set)
}
