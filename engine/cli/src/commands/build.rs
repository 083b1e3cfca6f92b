//! `kiln build MODEL.onnx -o ENGINE`: import, build for a backend, write the engine file.

use crate::backends::{self, SelectedBackend};
use crate::calibration::{self, CalibrationArgs};
use crate::commands;
use crate::logging::Verbosity;
use crate::progress;
use indicatif::ProgressBar;
use crate::model;
use crate::output_file;
use crate::shapes;
use crate::summary::{self, emit};
use crate::BuildArgs;
use anyhow::{bail, Context};
use kiln::tactics::cache::current_header;
use kiln::{BuildSummary, Builder, BuilderConfig};
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub fn build(args: &BuildArgs, verbosity: Verbosity) -> anyhow::Result<()> {
    let bytes = model::read_model_file(&args.model)?;
    if model::is_engine_file(&bytes) {
        bail!("`{}` is already a kiln engine file; `kiln build` takes an ONNX model", args.model.display());
    }
    let start = Instant::now();
    let network = args.precision.network_to_build(model::import_onnx(&args.model, &bytes)?)?;
    let import_time = start.elapsed();
    let profile = shapes::build_profile(
        &network,
        args.min_shapes.as_deref(),
        args.opt_shapes.as_deref(),
        args.max_shapes.as_deref(),
    )?;
    let backend = backends::select(args.backend)?;
    let mut config = BuilderConfig { profiles: profile.into_iter().collect(), ..builder_config(args)? };
    let calibration = CalibrationArgs { data: args.calib.as_deref(), cache: args.calib_cache.as_deref(), method: args.calib_method };
    if config.builder_flags.contains(kiln::BuilderFlag::Int8) {
        config.int8_calibration = calibration::table(&calibration, &network, &backend, &config.profiles)?.map(Arc::new);
    } else if calibration.data.is_some() || calibration.cache.is_some() {
        bail!("--calib and --calib-cache calibrate an INT8 build: add --flag int8");
    }
    let foreign_cache = match &args.timing_cache {
        Some(path) => attach_timing_cache(&mut config, path, &backend, args)?,
        None => false,
    };
    config.tactics.error_on_timing_cache_miss = args.error_on_timing_cache_miss;
    let output = build_with_progress(&backend, &network, config.clone())?;
    let engine = output.engine;
    if matches!(verbosity, Verbosity::Verbose(_)) {
        emit(&decisions(&engine, &output.log))?;
    }
    let mut phases = output.summary;
    let start = Instant::now();
    let engine_file = engine.serialize();
    phases.phase("serialize", start);
    output_file::write_bytes(&args.output, &engine_file)
        .with_context(|| format!("cannot write engine file `{}`", args.output.display()))?;
    if let (Some(path), Some(cache)) = (&args.timing_cache, config.timing_cache()) {
        save_timing_cache(path, cache, foreign_cache, args.overwrite_timing_cache);
    }

    if let Some(path) = &args.json {
        crate::summary::write_json(path, &build_json(args, &backend, &engine, &phases, engine_file.len(), import_time))?;
        if output_file::is_stdout(path) {
            return Ok(());
        }
    }
    if verbosity == Verbosity::Quiet {
        return Ok(());
    }
    emit(&format!(
        "model:    {}\nbackend:  {}\ndevice:   {}\nflags:    {}\nlayers:   {} before passes, {} in the engine\ntactics:  {} layer signatures timed, {} layers from the timing cache\n{}weights:  {}\nactivations: {} peak{}\nengine:   {} written to `{}`\nimport:   {}\nbuild:    {}\n{}",
        args.model.display(),
        backend.describe(),
        backend.device.name,
        engine.build_flags().builder_flags.names(),
        phases.layers_before,
        phases.layers_after,
        phases.layers_timed,
        phases.layers_from_cache,
        sparsity_line(phases.sparsity.as_ref()),
        summary::byte_size(engine.weights_bytes()),
        summary::byte_size(engine.peak_activation_bytes() as usize),
        profiles_text(&engine),
        summary::byte_size(engine_file.len()),
        args.output.display(),
        summary::duration(import_time),
        summary::duration(phases.total()),
        phase_lines(&phases),
    ))
}

/// The build summary as JSON, with every layer's tactic.
fn build_json(
    args: &BuildArgs,
    backend: &SelectedBackend,
    engine: &kiln::Engine,
    phases: &BuildSummary,
    engine_bytes: usize,
    import_time: std::time::Duration,
) -> serde_json::Value {
    let layers: Vec<serde_json::Value> = engine
        .network()
        .layers()
        .iter()
        .enumerate()
        .map(|(i, l)| serde_json::json!({ "name": l.name, "type": l.kind.type_name(), "tactic": engine.tactic_name(i) }))
        .collect();
    let phase_times: serde_json::Map<String, serde_json::Value> =
        phases.phases.iter().map(|(name, d)| (name.clone(), serde_json::json!(d.as_secs_f64()))).collect();
    serde_json::json!({
        "model": args.model.display().to_string(),
        "backend": backend.name(),
        "device": backend.device.name,
        "flags": engine.build_flags().builder_flags.names(),
        "layers_before_passes": phases.layers_before,
        "layers": layers,
        "layers_timed": phases.layers_timed,
        "layers_from_timing_cache": phases.layers_from_cache,
        "weights_bytes": engine.weights_bytes(),
        "peak_activation_bytes": engine.peak_activation_bytes(),
        "engine_bytes": engine_bytes,
        "engine": args.output.display().to_string(),
        "import_s": import_time.as_secs_f64(),
        "build_s": phases.total().as_secs_f64(),
        "phases_s": phase_times,
        "sparsity": phases.sparsity.as_ref().map(|r| serde_json::json!({ "eligible": r.eligible, "sparse_kernel_offered": r.offered, "picked": r.picked })),
    })
}

/// `sparsity: 3 layers eligible for 2:4 sparse math, 1 runs sparse (conv2)` with the
/// SPARSE_WEIGHTS flag; nothing without it.
fn sparsity_line(report: Option<&kiln::sparsity::SparsityReport>) -> String {
    let Some(r) = report else { return String::new() };
    let picked = if r.picked.is_empty() { String::new() } else { format!(" ({})", r.picked.join(", ")) };
    format!("sparsity: {} layers eligible for 2:4 sparse math, {} run sparse{picked}\n", r.eligible.len(), r.picked.len())
}

/// Reads the `--timing-cache` file into `config`. A cache of another device or kiln
/// version is refused unless `--ignore-timing-cache-mismatch`; returns whether it is one.
fn attach_timing_cache(
    config: &mut BuilderConfig,
    path: &Path,
    backend: &SelectedBackend,
    args: &BuildArgs,
) -> anyhow::Result<bool> {
    let cache = commands::cache::read_or_empty(path)?;
    let differences = cache.differences(&current_header(backend.name(), &backend.device));
    if !differences.is_empty() && !args.ignore_timing_cache_mismatch {
        bail!(
            "timing cache `{}` was made for another device or kiln version ({}); --ignore-timing-cache-mismatch uses it anyway, read only",
            path.display(),
            differences.join("; ")
        );
    }
    config.set_timing_cache(cache, args.ignore_timing_cache_mismatch);
    Ok(!differences.is_empty())
}

/// Writes the grown cache back (see [`commands::cache`]); another device's cache only
/// with `--overwrite-timing-cache`. A failure is a warning: the engine is written.
fn save_timing_cache(path: &Path, cache: kiln::TimingCache, foreign: bool, overwrite: bool) {
    let saved = match (foreign, overwrite) {
        (false, _) => commands::cache::save_merged(path, cache),
        (true, true) => commands::cache::replace(path, &cache),
        (true, false) => {
            tracing::warn!(
                "timing cache `{}` left as it was (another device's); --overwrite-timing-cache replaces it with this build's",
                path.display()
            );
            return;
        }
    };
    if let Err(error) = saved {
        tracing::warn!("timing cache not saved: {error:#}");
    }
}

/// What the builder decided, for `-v`: its log (precisions), then one line per engine
/// layer with its tactic, and one per candidate timed for it.
fn decisions(engine: &kiln::Engine, log: &[String]) -> String {
    let mut s = String::new();
    for line in log {
        let _ = writeln!(s, "builder: {line}");
    }
    let net = engine.network();
    for (i, layer) in net.layers().iter().enumerate() {
        let _ = writeln!(s, "layer `{}` [{}]: {} (0x{:016x})", layer.name, layer.kind.type_name(), engine.tactic_name(i), engine.tactic_value(i));
        let timed = engine.tactic_times(i);
        let fastest = timed.iter().map(|(_, ns)| *ns).min();
        for (candidate, ns) in timed {
            let mark = if Some(*ns) == fastest { " (fastest)" } else { "" };
            let _ = writeln!(s, "  timed {candidate}: {:.4} ms{mark}", *ns as f64 * 1e-6);
        }
    }
    s
}

/// `, 1 profile: x 1x3x8x8..4x3x8x8` or `` (none), for the summary's activations line.
fn profiles_text(engine: &kiln::Engine) -> String {
    let unplanned = engine.memory_plans().iter().map(|p| p.unplanned.len()).max().unwrap_or(0);
    let mut text = String::new();
    if !engine.profiles().is_empty() {
        let ranges: Vec<String> = engine
            .profiles()
            .iter()
            .map(|p| {
                p.dimension_ranges()
                    .map(|(name, r)| format!("{name} {}..{}", shapes::text(&r.min), shapes::text(&r.max)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        text += &format!(" over {} profile(s): {}", ranges.len(), ranges.join("; "));
    }
    if unplanned > 0 {
        text += &format!(" (+{unplanned} dynamically sized tensors: give --min-shapes/--max-shapes to bound them)");
    }
    text
}

/// Builds for `backend` with progress on stderr: a spinner until tactic selection starts,
/// then a bar over the layers whose tactics are chosen. Warnings are logged by the builder.
pub fn build_with_progress(
    backend: &SelectedBackend,
    network: &kiln::Network,
    mut config: BuilderConfig,
) -> anyhow::Result<kiln::BuildOutput> {
    let spinner = progress::spinner(format!("building for {} (passes)", backend.name()));
    let bar = progress::counter("choosing tactics", 0, "layers");
    let (shown, waiting) = (ProgressBar::clone(&bar), ProgressBar::clone(&spinner));
    config.tactics.progress = Some(kiln::tactics::ProgressHandle(Arc::new(move |done, layers, name| {
        waiting.finish_and_clear();
        shown.set_length(layers as u64);
        shown.set_position(done as u64);
        shown.set_message(name.to_string());
    })));
    let output = Builder::new(backend.backend.as_ref()).build_with_report(network, &config);
    spinner.finish_and_clear();
    bar.finish_and_clear();
    output.with_context(|| format!("cannot build an engine for `{}`", backend.name()))
}

fn builder_config(args: &BuildArgs) -> anyhow::Result<BuilderConfig> {
    let mut config = BuilderConfig {
        profiling_verbosity: args.profiling_verbosity.kiln(),
        max_memory_bytes: args.max_memory,
        ..BuilderConfig::default()
    };
    args.precision.apply(&mut config)?;
    Ok(config)
}

/// One indented line per build phase.
fn phase_lines(phases: &BuildSummary) -> String {
    let mut s = String::new();
    for (name, time) in &phases.phases {
        let _ = writeln!(s, "  {:<14}{}", format!("{name}:"), summary::duration(*time));
    }
    s
}
