//! `kiln`: builds, runs and inspects kiln inference engines from the command line.
//!
//! Every failure ends as one `error: …` line on stderr and a non-zero exit status; a panic
//! is a bug and is reported the same way (exit status 101) instead of a backtrace dump.
#![forbid(unsafe_code)]

mod backends;
mod calibration;
#[cfg(test)]
mod cli_reference;
mod commands;
mod compare;
mod inputs;
mod logging;
mod model;
mod npz;
mod onnx_summary;
mod output_file;
mod precision_options;
mod progress;
mod random_inputs;
mod report;
mod shapes;
mod stats;
mod summary;

use backends::BackendChoice;
use clap::{Parser, Subcommand};
use output_file::NamedFile;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "kiln", version, about = "Build, run and inspect kiln inference engines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// A plugin library to load before the command runs (repeatable; the libraries named by
    /// KILN_PLUGIN_PATH, `:`-separated files or folders, load first).
    #[arg(long = "plugins", value_name = "LIB", global = true)]
    plugins: Vec<PathBuf>,
    /// More log on stderr: -v the build's phases, precisions and memory plans (and `build`
    /// lists each layer's tactic); -vv every fusion and tactic decision; -vvv everything.
    /// Without -v or -q, RUST_LOG (e.g. `kiln=debug`) sets the log filter.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Errors only: no warnings, no progress bars, no build summary.
    #[arg(short = 'q', long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// How log lines are written on stderr.
    #[arg(long, value_enum, default_value_t = logging::LogFormat::Text, global = true)]
    log_format: logging::LogFormat,
    /// The device to build and run on, for a backend with several: cuda's ordinal, as
    /// nvidia-smi and CUDA_VISIBLE_DEVICES number them (trtexec's `--device`). Backends with
    /// one device take only 0.
    #[arg(long, value_name = "N", default_value_t = 0, global = true)]
    device: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an ONNX model or a kiln engine file once and summarize its inputs and outputs.
    Run(RunArgs),
    /// Build an engine file from an ONNX model.
    Build(BuildArgs),
    /// Show what an engine file or an ONNX model holds; for a model, every node kiln cannot import.
    ///
    /// An engine file: its device, build flags, inputs, outputs and every layer. An ONNX model:
    /// its inputs, outputs, opsets, op counts and initializers, and a capability report that
    /// names every node kiln cannot import with the reason (`--plugins LIB` for custom ops).
    Inspect(InspectArgs),
    /// Show, merge or edit a timing cache file (`kiln build --timing-cache`).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Run an ONNX model on several backends and compare their outputs (Polygraphy-style).
    #[command(after_help = COMPARE_HELP)]
    Compare(CompareArgs),
    /// Measure latency and throughput of a model or engine (trtexec-style).
    Bench(BenchArgs),
    /// Give an engine built with `--flag refit` new weights, or a `--flag strip_weights`
    /// engine the weights it left out (no kernel compiled, no tactic timed again).
    Refit(RefitArgs),
    /// List the backends, whether each is available here, and their devices.
    Devices {
        /// Also writes the list as JSON to this file (`-`: stdout, instead of the text).
        #[arg(long, value_name = "OUT")]
        json: Option<PathBuf>,
    },
    /// Plugin libraries: `kiln plugins list` shows every plugin loaded (with --plugins and
    /// KILN_PLUGIN_PATH), its library and its fields.
    #[command(subcommand)]
    Plugins(PluginsCommand),
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Every registered plugin: `namespace::name@version`, where it came from, its fields.
    List {
        /// Also writes the list as JSON to this file (`-`: stdout, instead of the text).
        #[arg(long, value_name = "OUT")]
        json: Option<PathBuf>,
    },
}

const COMPARE_HELP: &str = "\
Default tolerances by precision tier, the loosest the builder flags allow:
  fp32 (no --flag)   rtol 1e-5, atol 1e-5  (TF32 is off in compare unless --flag tf32)
  tf32 (--flag tf32) rtol 1e-3, atol 1e-3
  fp16 (--flag fp16) rtol 1e-2, atol 1e-2
  bf16 (--flag bf16) rtol 2e-2, atol 2e-2
An element fails only when |a-r| > atol and |a-r| > rtol*|r| (r: the reference, the last
backend, or with --load-outputs the loaded outputs). --rtol NAME:R and --atol NAME:A set one
tensor's tolerance. NaN equals NaN, NaN against a number fails, infinities must match exactly;
integer and bool outputs compare exactly.
Exit status: 0 all within tolerance, 3 results differ, 4 a backend could not build or run
the model (or is not available), 1 any other error.";

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Every entry: key, chosen tactic and each candidate's median time.
    Show {
        /// The timing cache file.
        file: PathBuf,
        /// Also writes the cache as JSON to this file (`-`: stdout, instead of the text).
        #[arg(long, value_name = "OUT")]
        json: Option<PathBuf>,
    },
    /// Combines two caches of one device into a third (A's entries win on shared keys).
    Merge {
        /// The first cache; its entries win where both caches time the same layer.
        a: PathBuf,
        /// The second cache, of the same backend, device and kiln version.
        b: PathBuf,
        /// Where to write A + B (replaced whole, under its lock).
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
    },
    /// Sets the chosen tactic of one entry (a candidate's full id or name), in place.
    Edit {
        /// The timing cache file, changed in place under its lock.
        file: PathBuf,
        /// The entry's key, as `kiln cache show` prints it.
        key: String,
        /// One of the entry's candidates: its full id (`cpu/conv_direct@…`) or its name.
        tactic: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// An `.onnx` model or a kiln engine file (recognized by its magic bytes).
    pub model: PathBuf,
    /// The backend to run on; `auto` takes the first available of cuda, wgpu, cpu (for an
    /// engine file: the backend it was built for).
    #[arg(long, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    #[command(flatten)]
    pub input: inputs::InputOptions,
    /// Builder flags, for an ONNX model.
    #[command(flatten)]
    pub precision: precision_options::PrecisionOptions,
    /// Writes every network output, keyed by output name, to this (uncompressed) `.npz` file.
    #[arg(long, value_name = "OUT.npz")]
    pub save_outputs: Option<PathBuf>,
    /// Also writes the report as JSON to this file (`-`: stdout, instead of the text).
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct RefitArgs {
    /// The engine file to refit (built with `--flag refit`).
    pub engine: PathBuf,
    /// The new weights: an ONNX model (its initializers, matched to the engine's weights by
    /// name) or an `.npz` whose arrays are named after the weights (`kiln inspect` lists them).
    #[arg(long, value_name = "MODEL.onnx|WEIGHTS.npz")]
    pub weights: PathBuf,
    /// Where to write the refitted engine.
    #[arg(short, long, value_name = "ENGINE")]
    pub output: PathBuf,
    /// The backend the refit replays the build's rewrites on: the engine's own (`auto`).
    #[arg(long, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The ONNX model to build.
    pub model: PathBuf,
    /// Where to write the engine file.
    #[arg(short, long, value_name = "ENGINE")]
    pub output: PathBuf,
    /// The backend to build for; `auto` takes the first available of cuda, wgpu, cpu.
    #[arg(long, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Smallest dims of the dynamic inputs, `name:1x3x224x224[,name2:…]` (an optimization
    /// profile; needs --max-shapes).
    #[arg(long, value_name = "SHAPES")]
    pub min_shapes: Option<String>,
    /// Dims to tune for; default: the max shapes.
    #[arg(long, value_name = "SHAPES")]
    pub opt_shapes: Option<String>,
    /// Largest dims of the dynamic inputs.
    #[arg(long, value_name = "SHAPES")]
    pub max_shapes: Option<String>,
    /// Builder flags; TF32 is on unless `--no-tf32`.
    #[command(flatten)]
    pub precision: precision_options::PrecisionOptions,
    /// How much `kiln inspect --verbosity` may show of the engine.
    #[arg(long, value_enum, default_value_t = Verbosity::LayerNamesOnly)]
    pub profiling_verbosity: Verbosity,
    /// A timing cache file: read if it exists, grown by the build and written back (merged,
    /// under a lock on FILE.lock, with what other builds wrote meanwhile). A cache that
    /// cannot be written is a warning; the engine is still written.
    #[arg(long, value_name = "FILE")]
    pub timing_cache: Option<PathBuf>,
    /// Fails the build when a layer is not in the timing cache.
    #[arg(long)]
    pub error_on_timing_cache_miss: bool,
    /// Uses a timing cache made on another device or kiln version (with a warning), read
    /// only: the file stays as it is unless --overwrite-timing-cache.
    #[arg(long)]
    pub ignore_timing_cache_mismatch: bool,
    /// With --ignore-timing-cache-mismatch: replaces the other device's cache file with
    /// this build's (its entries relabelled as this device's).
    #[arg(long, requires = "ignore_timing_cache_mismatch")]
    pub overwrite_timing_cache: bool,
    /// Also writes the report as JSON to this file (`-`: stdout, instead of the text).
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
    /// With `--flag int8`: a folder of .npz files, one calibration batch each (arrays named as
    /// the network's inputs), run in f32 to measure each quantized tensor's range.
    #[arg(long, value_name = "DIR")]
    pub calib: Option<PathBuf>,
    /// With `--flag int8`: the calibration cache; read when it exists (calibration is
    /// skipped), else written after calibrating over --calib.
    #[arg(long, value_name = "FILE")]
    pub calib_cache: Option<PathBuf>,
    /// How calibration picks each range: entropy (TensorRT's default), minmax, percentile
    /// (99.99) or percentile=P.
    #[arg(long, value_name = "METHOD", default_value = "entropy", value_parser = parse_calibration_method)]
    pub calib_method: kiln::quant::CalibrationMethod,
}

fn parse_calibration_method(s: &str) -> Result<kiln::quant::CalibrationMethod, String> {
    s.parse()
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The ONNX model to compare, or a kiln engine file (run on its backend and compared with
    /// --load-outputs).
    #[arg(value_name = "MODEL.onnx|ENGINE")]
    pub model: PathBuf,
    /// Backends, comma-separated: each is compared with the last one (the reference), e.g.
    /// `wgpu,cpu`; with --load-outputs, each is compared with the loaded outputs.
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub backends: Vec<String>,
    /// Reference outputs computed elsewhere (e.g. by PyTorch), an `.npz` keyed by output
    /// name: every backend is compared with them; outputs the file lacks are not compared.
    #[arg(long, value_name = "GOLDEN.npz")]
    pub load_outputs: Option<PathBuf>,
    /// Writes each backend's outputs to DIR/BACKEND.npz (a repeated backend: BACKEND-2.npz).
    #[arg(long, value_name = "DIR")]
    pub save_outputs: Option<PathBuf>,
    /// With --mark-all: writes every compared tensor of each backend to DIR/BACKEND.npz.
    #[arg(long, value_name = "DIR", requires = "mark_all")]
    pub save_intermediates: Option<PathBuf>,
    /// The inputs, the same for every backend.
    #[command(flatten)]
    pub input: inputs::InputOptions,
    /// Relative tolerance, `R` for every tensor or `NAME:R` for one (repeatable); default:
    /// the precision tier's (see below).
    #[arg(long, value_name = "[NAME:]R")]
    pub rtol: Vec<String>,
    /// Absolute tolerance, `A` for every tensor or `NAME:A` for one (repeatable); default:
    /// the precision tier's (see below).
    #[arg(long, value_name = "[NAME:]A")]
    pub atol: Vec<String>,
    /// Compares every intermediate tensor (built without optimization passes so none is
    /// fused away) and names the first layer whose output diverges.
    #[arg(long)]
    pub mark_all: bool,
    /// Builder flags for every backend's build; they also pick the default tolerances
    /// (TF32 is off in compare unless `--flag tf32`).
    #[command(flatten)]
    pub precision: precision_options::PrecisionOptions,
    /// Also writes every figure (per backend pair and tensor) to this JSON file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// An `.onnx` model (built first) or a kiln engine file.
    pub model: PathBuf,
    /// The backend; `auto` takes the first available of cuda, wgpu, cpu (for an engine
    /// file: the backend it was built for).
    #[arg(long, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Builder flags (ONNX models only).
    #[command(flatten)]
    pub precision: precision_options::PrecisionOptions,
    #[command(flatten)]
    pub input: inputs::InputOptions,
    /// Warm-up time before measuring, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "W")]
    pub warmup_ms: u64,
    /// Least time to measure for, in seconds (runs go on until this and --iterations are
    /// both reached).
    #[arg(long, default_value_t = 3.0, value_name = "D")]
    pub duration_s: f64,
    /// Least number of measured iterations.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub iterations: u64,
    /// Runs N execution contexts of the engine at once, each on its own stream and thread
    /// (trtexec's `--streams`): throughput is theirs together, latency each iteration's.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub streams: usize,
    /// Asks the backend not to capture and replay CUDA graphs (no effect on backends
    /// without graphs; the output says so).
    #[arg(long)]
    pub no_cuda_graph: bool,
    /// Keeps every input and output in device memory, filled once before timing (trtexec's
    /// `--noDataTransfers`): iterations time no host copy. Needs a backend that runs on device
    /// memory (cuda).
    #[arg(long, conflicts_with = "pinned_host_io")]
    pub no_data_transfers: bool,
    /// Keeps every input and output in page-locked host memory, filled once, that the device
    /// copies straight from and to (what registered host buffers give): iterations time one
    /// DMA each way and no staging copy. Needs a backend that runs on device memory (cuda).
    #[arg(long)]
    pub pinned_host_io: bool,
    /// Writes every figure to this JSON file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Writes every timed iteration's latency, enqueue and device times to this JSON file
    /// (trtexec's `--exportTimes`).
    #[arg(long, value_name = "OUT")]
    pub export_times: Option<PathBuf>,
    /// After the timed runs, profiles every layer in separate runs (interpreted, each layer
    /// timed on the device) and prints the per-layer medians; also in `--json`.
    #[arg(long)]
    pub dump_profile: bool,
    /// Writes the per-layer profile as JSON to this file (implies the profile runs).
    #[arg(long, value_name = "OUT")]
    pub export_profile: Option<PathBuf>,
    /// Number of profile runs (the per-layer figures are their medians).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub profile_runs: usize,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The engine file or ONNX model to describe (an engine is recognized by its magic bytes).
    #[arg(value_name = "ENGINE|MODEL.onnx")]
    pub file: PathBuf,
    /// Text for people, JSON for programs (`--format json`).
    #[arg(long, value_enum, default_value_t = InspectFormat::Text)]
    pub format: InspectFormat,
    /// Engine files: prints the engine inspector's information (TensorRT's
    /// `getEngineInformation`) at this verbosity, capped by the one the engine was built
    /// with, instead of the summary.
    #[arg(long, value_enum)]
    pub verbosity: Option<Verbosity>,
    /// ONNX models: also checks the imported layers against this backend (`auto`: the first
    /// available). A backend reports the first layer it cannot run, not every one.
    #[arg(long)]
    pub backend: Option<BackendChoice>,
}

/// Profiling verbosity (seed §6.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Verbosity {
    None,
    LayerNamesOnly,
    Detailed,
}

impl Verbosity {
    pub fn kiln(self) -> kiln::ProfilingVerbosity {
        match self {
            Verbosity::None => kiln::ProfilingVerbosity::None,
            Verbosity::LayerNamesOnly => kiln::ProfilingVerbosity::LayerNamesOnly,
            Verbosity::Detailed => kiln::ProfilingVerbosity::Detailed,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InspectFormat {
    Text,
    Json,
}

/// `--max-memory`: bytes, or a number with K, M, G or T.
fn parse_memory_size(text: &str) -> Result<u64, String> {
    kiln::limits::parse_bytes(text)
}

/// Every file the command reads or writes, for [`output_file::check_distinct`].
fn named_files<'a>(command: &'a Command, loaded: &'a commands::plugins::Loaded) -> Vec<NamedFile<'a>> {
    let mut files: Vec<NamedFile> =
        loaded.libraries.iter().map(|l| NamedFile::reads("the plugin library", &l.path)).collect();
    let inputs = |model: &'a PathBuf, input: &'a inputs::InputOptions| {
        std::iter::once(NamedFile::reads("the model", model)).chain(input.files().map(|(what, p)| NamedFile::reads(what, p)))
    };
    match command {
        Command::Run(args) => {
            files.extend(inputs(&args.model, &args.input));
            files.extend(args.save_outputs.iter().map(|p| NamedFile::writes("--save-outputs", p)));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
        }
        Command::Build(args) => {
            files.push(NamedFile::reads("the model", &args.model));
            files.extend(args.timing_cache.iter().map(|p| NamedFile::updates("--timing-cache", p)));
            files.push(NamedFile::writes("--output", &args.output));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
        }
        Command::Compare(args) => {
            files.extend(inputs(&args.model, &args.input));
            files.extend(args.load_outputs.iter().map(|p| NamedFile::reads("--load-outputs", p)));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
        }
        Command::Bench(args) => {
            files.extend(inputs(&args.model, &args.input));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
            files.extend(args.export_profile.iter().map(|p| NamedFile::writes("--export-profile", p)));
            files.extend(args.export_times.iter().map(|p| NamedFile::writes("--export-times", p)));
        }
        Command::Cache(CacheCommand::Merge { a, b, output }) => {
            files.extend([NamedFile::reads("cache A", a), NamedFile::reads("cache B", b)]);
            files.push(NamedFile::writes("--output", output));
        }
        Command::Cache(CacheCommand::Edit { file, .. }) => files.push(NamedFile::updates("the cache", file)),
        Command::Cache(CacheCommand::Show { json, .. }) | Command::Devices { json } => {
            files.extend(json.iter().map(|p| NamedFile::writes("--json", p)));
        }
        Command::Plugins(PluginsCommand::List { json }) => files.extend(json.iter().map(|p| NamedFile::writes("--json", p))),
        Command::Refit(args) => {
            files.push(NamedFile::reads("the engine", &args.engine));
            files.push(NamedFile::reads("--weights", &args.weights));
            files.push(NamedFile::writes("--output", &args.output));
        }
        Command::Inspect(_) => {}
    }
    files
}

fn main() -> ExitCode {
    // Mesa's Vulkan drivers complain on stderr when XDG_RUNTIME_DIR is unset, though kiln
    // opens no window; set it before any thread exists.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(usage) => return report::usage_error(usage),
    };
    let verbosity = logging::Verbosity::from_flags(cli.quiet, cli.verbose);
    progress::set_hidden(cli.quiet);
    report::run_reporting_errors(move || {
        logging::init(verbosity, cli.quiet || cli.verbose > 0, cli.log_format)?;
        let loaded = commands::plugins::load(&cli.plugins)?;
        output_file::check_distinct(&named_files(&cli.command, &loaded))?;
        backends::load_plugin_backends()?;
        backends::set_device(cli.device);
        let requested = match &cli.command {
            Command::Run(args) => Some(args.backend),
            Command::Build(args) => Some(args.backend),
            Command::Bench(args) => Some(args.backend),
            Command::Inspect(args) => args.backend,
            Command::Refit(args) => Some(args.backend),
            _ => None,
        };
        // Any name parses (backend libraries add theirs at start): check it before any work.
        if let Some(BackendChoice::Named(name)) = requested {
            if !backends::is_known(name) {
                anyhow::bail!("unknown backend `{name}` (known: {}, auto)", backends::known_names_text());
            }
        }
        match cli.command {
            Command::Run(args) => commands::run::run(&args),
            Command::Build(args) => commands::build::build(&args, verbosity),
            Command::Inspect(args) => commands::inspect::inspect(&args),
            Command::Cache(command) => commands::cache::cache(&command),
            Command::Compare(args) => commands::compare::compare(&args),
            Command::Bench(args) => commands::bench::bench(&args),
            Command::Refit(args) => commands::refit::refit(&args, verbosity),
            Command::Devices { json } => commands::devices::devices(json.as_deref()),
            Command::Plugins(PluginsCommand::List { json }) => commands::plugins::list(&loaded, json.as_deref()),
        }
    })
}
