//! `kiln compare MODEL --backends a,b`: run one model on several backends and compare every
//! output with the last backend's (the reference); see [`crate::compare`].

use crate::backends::{self, SelectedBackend};
use crate::compare::stats::{multi_index, Detail, TensorComparison, ToleranceSet, Tolerances};
use crate::compare::{self, CompareError, CompareOptions, Comparison, Reference, Runner, TensorOrigin};
use crate::npz;
use anyhow::Context;
use kiln::{BuilderFlags, Network};
use std::collections::HashMap;
use std::path::Path;
use crate::model::{self, Model};
use crate::report::ExitWith;
use crate::shapes;
use crate::stats::Summary;
use crate::output_file;
use crate::summary::{self, emit};
use crate::CompareArgs;
use anyhow::bail;
use kiln::{BuilderConfig, BuilderFlag, Optimization};
use serde_json::{json, Value};
use std::fmt::Write;

/// Exit status when a backend's results are outside tolerance.
pub const EXIT_MISMATCH: u8 = 3;
/// Exit status when a backend could not build or run the model (nothing to compare).
pub const EXIT_BACKEND_FAILED: u8 = 4;

/// Default tolerances by precision tier, the loosest the builder flags allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
}

impl Tier {
    pub fn of(flags: &BuilderFlags) -> Tier {
        if flags.contains(BuilderFlag::Bf16) {
            Tier::Bf16
        } else if flags.contains(BuilderFlag::Fp16) {
            Tier::Fp16
        } else if flags.contains(BuilderFlag::Tf32) {
            Tier::Tf32
        } else {
            Tier::Fp32
        }
    }

    /// fp32: Polygraphy's defaults; summation order alone moves long dot products by a few
    /// 1e-6, and near-zero results have no meaningful relative error. TF32 keeps 10
    /// mantissa bits (2^-11 ≈ 5e-4 per rounding), f16 the same bits with a smaller range,
    /// bf16 7 bits (2^-8 ≈ 4e-3 per rounding), errors that grow along a network.
    pub fn tolerances(self) -> Tolerances {
        match self {
            Tier::Fp32 => Tolerances { rtol: 1e-5, atol: 1e-5 },
            Tier::Tf32 => Tolerances { rtol: 1e-3, atol: 1e-3 },
            Tier::Fp16 => Tolerances { rtol: 1e-2, atol: 1e-2 },
            Tier::Bf16 => Tolerances { rtol: 2e-2, atol: 2e-2 },
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::Fp32 => "fp32",
            Tier::Tf32 => "tf32",
            Tier::Fp16 => "fp16",
            Tier::Bf16 => "bf16",
        }
    }
}

pub fn compare(args: &CompareArgs) -> anyhow::Result<()> {
    if let Some(unknown) = args.backends.iter().find(|name| !backends::is_known(name)) {
        bail!("unknown backend `{unknown}` in --backends (known: {})", backends::known_names_text());
    }
    let golden = match &args.load_outputs {
        Some(path) => Some(npz::read_npz(path)?.into_iter().collect::<std::collections::BTreeMap<_, _>>()),
        None => None,
    };
    let open = |name: &str| backends::open_requested(name).map_err(|e| ExitWith { status: EXIT_BACKEND_FAILED, message: e.to_string() });
    let (network, engine, selected): (Network, Option<Box<kiln::Engine>>, Vec<SelectedBackend>) = match model::load(&args.model)? {
        Model::Onnx { network, .. } => {
            let needed = if golden.is_some() { 1 } else { 2 };
            if args.backends.len() < needed {
                bail!("--backends needs at least two backends, comma-separated (the last is the reference), e.g. wgpu,cpu; or one with --load-outputs");
            }
            let selected = args.backends.iter().map(|n| open(n)).collect::<Result<_, _>>()?;
            (args.precision.network_to_build(network)?, None, selected)
        }
        Model::Engine { engine, .. } => {
            if golden.is_none() {
                bail!("`{}` is a kiln engine file, built for one backend: compare it with --load-outputs GOLDEN.npz, or give the ONNX model", args.model.display());
            }
            args.precision.refuse_for_engine(&args.model, &engine.build_flags().builder_flags.names())?;
            if let Some(other) = args.backends.iter().find(|b| *b != engine.backend()) {
                bail!("`{}` was built for backend `{}`; it cannot run on `{other}`", args.model.display(), engine.backend());
            }
            let selected = vec![open(engine.backend())?];
            (engine.network().clone(), Some(engine), selected)
        }
    };
    let config = builder_config(args)?;
    let tier = Tier::of(match &engine {
        Some(e) => &e.build_flags().builder_flags,
        None => &config.builder_flags,
    });
    let tolerances = tolerance_set(args, tier.tolerances(), &network)?;
    let (inputs, input_source) = crate::inputs::make(&args.input, &network, engine.as_ref().and_then(|e| e.profiles().first()))?;
    let config = BuilderConfig { profiles: shapes::exact_profile(&network, &inputs).into_iter().collect(), ..config };
    let options = CompareOptions { config, tolerances: tolerances.clone(), mark_all: args.mark_all };
    let runners: Vec<Runner> = match engine {
        Some(engine) => vec![Runner::Engine(engine, selected[0].backend.as_ref())],
        None => selected.iter().map(|s| Runner::Build(s.backend.as_ref())).collect(),
    };
    let reference = match golden {
        Some(outputs) => Reference::Loaded { label: args.load_outputs.as_deref().unwrap_or(Path::new("")).display().to_string(), outputs },
        None => Reference::LastRun,
    };
    let result = compare::compare_runs(&network, runners, &inputs, &options, reference).map_err(|e| match e {
        CompareError::BackendFailed { .. } => {
            anyhow::Error::new(ExitWith { status: EXIT_BACKEND_FAILED, message: e.to_string() })
        }
        other => anyhow::Error::new(other),
    })?;
    save_runs(args, &result, &network)?;
    let tolerances = tolerances.default;

    let mut text = String::new();
    let _ = writeln!(text, "model:      {}", args.model.display());
    let names: Vec<String> = selected.iter().map(|s| format!("{} ({})", s.name(), s.device.name)).collect();
    let _ = writeln!(text, "backends:   {} (reference: `{}`)", names.join(", "), result.reference);
    let _ = writeln!(text, "inputs:     {input_source}");
    let per_tensor = options.tolerances.rtol.len() + options.tolerances.atol.len();
    let source = match (args.rtol.is_empty() && args.atol.is_empty(), per_tensor) {
        (true, _) => "default".to_string(),
        (false, 0) => "given".to_string(),
        (false, n) => format!("given; {n} per-tensor value(s), see --json or each tensor"),
    };
    let _ = writeln!(
        text,
        "tolerance:  {} tier, rtol {:e}, atol {:e} ({source}); an element fails when outside both",
        tier.name(),
        tolerances.rtol,
        tolerances.atol
    );
    let _ = writeln!(text, "flags:      {}", options.config.builder_flags.names());
    let optimization = match result.optimization {
        Optimization::None => "none (--mark-all: every intermediate tensor is an output, so no pass may fuse it away)",
        Optimization::Full => "full (folding and fusion)",
    };
    let _ = writeln!(text, "optimization: {optimization}");
    let _ = writeln!(text, "compared:   {} tensor(s) per backend", result.compared_tensors);
    for run in &result.runs {
        let _ = writeln!(
            text,
            "ran:        `{}`: build {}, run {}",
            run.backend,
            summary::duration(run.build_time),
            summary::duration(run.run_time)
        );
    }
    report_pairs(&mut text, &result, args.mark_all);
    if let Some(path) = &args.json {
        crate::summary::write_json(path, &to_json(&result, tier, &options.tolerances))?;
    }
    if !args.json.as_deref().is_some_and(output_file::is_stdout) {
        emit(&text)?;
    }
    if result.passed() {
        return Ok(());
    }
    let failing: Vec<String> = result
        .pairs
        .iter()
        .filter(|p| !p.passed())
        .map(|p| format!("`{}` differs from `{}`", p.backend, result.reference))
        .collect();
    Err(ExitWith { status: EXIT_MISMATCH, message: format!("results differ: {}", failing.join("; ")) }.into())
}

/// `--rtol`/`--atol`: a bare number replaces the tier's default; `NAME:X` sets one tensor's
/// (an output, or with --mark-all any compared tensor, named as the model names it).
fn tolerance_set(args: &CompareArgs, defaults: Tolerances, network: &Network) -> anyhow::Result<ToleranceSet> {
    let mut set = ToleranceSet::uniform(defaults);
    for (option, values, default, per_tensor) in
        [("--rtol", &args.rtol, &mut set.default.rtol, &mut set.rtol), ("--atol", &args.atol, &mut set.default.atol, &mut set.atol)]
    {
        for value in values {
            // A tensor name may contain `:`; the number after the last one is the value.
            let (name, number) = match value.rsplit_once(':') {
                Some((name, number)) => (Some(name), number),
                None => (None, value.as_str()),
            };
            let x: f64 = number.trim().parse().ok().filter(|x: &f64| *x >= 0.0).ok_or_else(|| {
                anyhow::anyhow!("{option} `{value}`: the tolerance must be a non-negative number (`X` or `NAME:X`)")
            })?;
            match name {
                None => *default = x,
                Some(name) => {
                    if network.tensors().iter().all(|t| t.name != name) {
                        bail!("{option} `{value}`: the model has no tensor named `{name}`");
                    }
                    per_tensor.insert(name.to_string(), x);
                }
            }
        }
    }
    Ok(set)
}

/// `--save-outputs DIR` and `--save-intermediates DIR`: each run's tensors to
/// DIR/BACKEND.npz (a repeated backend gets `-2`, `-3`, … in the order given).
fn save_runs(args: &CompareArgs, result: &Comparison, network: &Network) -> anyhow::Result<()> {
    let outputs: std::collections::HashSet<&str> = network.outputs().iter().map(|&t| network.tensor(t).name.as_str()).collect();
    for (dir, only_outputs) in [(&args.save_outputs, true), (&args.save_intermediates, false)] {
        let Some(dir) = dir else { continue };
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create folder `{}`", dir.display()))?;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for run in &result.runs {
            let count = seen.entry(run.backend.as_str()).or_insert(0);
            *count += 1;
            let file = if *count == 1 { format!("{}.npz", run.backend) } else { format!("{}-{count}.npz", run.backend) };
            let tensors = run.outputs.iter().filter(|(name, _)| !only_outputs || outputs.contains(name.as_str()));
            npz::write_npz(&dir.join(file), tensors.map(|(name, t)| (name.as_str(), t)))?;
        }
    }
    Ok(())
}

fn builder_config(args: &CompareArgs) -> anyhow::Result<BuilderConfig> {
    let mut config = BuilderConfig { max_memory_bytes: args.max_memory, ..BuilderConfig::default() };
    // TF32 changes f32 results: off unless asked for, so the default tier is fp32.
    config.clear_flag(BuilderFlag::Tf32);
    args.precision.apply(&mut config)?;
    Ok(config)
}

fn report_pairs(text: &mut String, result: &Comparison, mark_all: bool) {
    for pair in &result.pairs {
        let _ = writeln!(text, "\n`{}` against `{}`:", pair.backend, result.reference);
        let outputs = pair.tensors.iter().filter(|(_, o)| o.as_ref().is_none_or(|o| o.is_network_output));
        for (tensor, _) in outputs {
            write_tensor(text, "output", tensor);
        }
        if mark_all {
            let intermediates = pair.tensors.iter().filter(|(_, o)| o.as_ref().is_some_and(|o| !o.is_network_output));
            let (count, failing) = intermediates.fold((0, 0), |(n, f), (t, _)| (n + 1, f + usize::from(!t.passed())));
            let _ = writeln!(text, "intermediate tensors: {count} compared, {failing} outside tolerance");
            match pair.first_divergence() {
                Some((tensor, origin)) => {
                    let _ = writeln!(text, "first divergence: {}", describe_origin(origin));
                    write_tensor(text, "tensor", tensor);
                }
                None => {
                    let _ = writeln!(text, "first divergence: none");
                }
            }
        }
        let failed = pair.tensors.iter().filter(|(t, _)| !t.passed()).count();
        let verdict = if pair.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(text, "result: {verdict} ({failed} of {} tensors outside tolerance)", pair.tensors.len());
    }
}

fn describe_origin(origin: &Option<TensorOrigin>) -> String {
    match origin {
        Some(o) => format!("layer #{} `{}` ({})", o.layer_index, o.layer_name, o.layer_type),
        None => "a network input".into(),
    }
}

fn write_tensor(text: &mut String, what: &str, t: &TensorComparison) {
    let verdict = if t.passed() { "PASS" } else { "FAIL" };
    let _ = writeln!(text, "{what} `{}` {}{:?}: {verdict}", t.name, t.dtype, t.shape);
    match &t.detail {
        Detail::Float(errors) => {
            write_summary(text, "abs error", errors.absolute);
            write_summary(text, "rel error", errors.relative);
            if errors.non_finite_mismatches > 0 {
                let _ = writeln!(text, "  NaN/inf:   {} elements not matched exactly", errors.non_finite_mismatches);
            }
            if let (false, Some((index, got, expected))) = (t.passed(), errors.worst) {
                let _ =
                    writeln!(text, "  worst:     at {:?}: {got} vs reference {expected}", multi_index(index, &t.shape));
            }
        }
        Detail::Exact => {}
        Detail::Incomparable(reason) => {
            let _ = writeln!(text, "  not comparable: {reason}");
        }
    }
    let _ = writeln!(text, "  mismatches: {} of {} elements", t.mismatches, t.elements);
}

fn write_summary(text: &mut String, label: &str, summary: Option<Summary>) {
    match summary {
        Some(s) => {
            let _ = writeln!(
                text,
                "  {label}: max {:.3e}, mean {:.3e}, median {:.3e}, p99 {:.3e}",
                s.max, s.mean, s.median, s.p99
            );
        }
        None => {
            let _ = writeln!(text, "  {label}: none (no finite element pairs)");
        }
    }
}

/// Every figure of the comparison, for `--json`.
fn to_json(result: &Comparison, tier: Tier, tolerances: &ToleranceSet) -> Value {
    let origin_json = |origin: &Option<TensorOrigin>| match origin {
        Some(o) => json!({ "index": o.layer_index, "name": o.layer_name, "type": o.layer_type }),
        None => Value::Null,
    };
    let tensor_json = |(t, origin): &(TensorComparison, Option<TensorOrigin>)| {
        let mut v = json!({
            "name": t.name,
            "dtype": t.dtype.name(),
            "shape": t.shape,
            "elements": t.elements,
            "mismatches": t.mismatches,
            "passed": t.passed(),
            "rtol": tolerances.of(&t.name).rtol,
            "atol": tolerances.of(&t.name).atol,
            "network_output": origin.as_ref().is_none_or(|o| o.is_network_output),
            "layer": origin_json(origin),
        });
        match &t.detail {
            Detail::Float(e) => {
                v["absolute_error"] = e.absolute.map_or(Value::Null, Summary::to_json);
                v["relative_error"] = e.relative.map_or(Value::Null, Summary::to_json);
                v["non_finite_mismatches"] = json!(e.non_finite_mismatches);
            }
            Detail::Exact => v["exact"] = json!(true),
            Detail::Incomparable(reason) => v["not_comparable"] = json!(reason),
        }
        v
    };
    json!({
        "reference": result.reference,
        "tier": tier.name(),
        "rtol": tolerances.default.rtol,
        "atol": tolerances.default.atol,
        "optimization": format!("{:?}", result.optimization).to_lowercase(),
        "passed": result.passed(),
        "runs": result.runs.iter().map(|r| json!({
            "backend": r.backend,
            "build_s": r.build_time.as_secs_f64(),
            "run_s": r.run_time.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "pairs": result.pairs.iter().map(|p| json!({
            "backend": p.backend,
            "passed": p.passed(),
            "first_divergence": p.first_divergence().map(|(t, o)| json!({ "tensor": t.name, "layer": origin_json(o) })),
            "tensors": p.tensors.iter().map(tensor_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
