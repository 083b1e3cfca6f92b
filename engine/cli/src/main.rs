//! `kiln`: builds, runs and inspects kiln inference engines from the command line.
//!
//! Every failure ends as one `error: …` line on stderr and a non-zero exit status; a panic
//! is a bug and is reported the same way (exit status 101) instead of a backtrace dump.
#![forbid(unsafe_code)]

mod backends;
mod commands;
mod compare;
mod inputs;
mod model;
mod npz;
mod output_file;
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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an ONNX model or a kiln engine file once and summarize its inputs and outputs.
    Run(RunArgs),
    /// Build an engine file from an ONNX model.
    Build(BuildArgs),
    /// Show what an engine file holds: device, inputs, outputs and every layer.
    Inspect(InspectArgs),
    /// Show, merge or edit a timing cache file (`kiln build --timing-cache`).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Run an ONNX model on several backends and compare their outputs (Polygraphy-style).
    #[command(after_help = COMPARE_HELP)]
    Compare(CompareArgs),
    /// Measure latency and throughput of a model or engine (trtexec-style).
    Bench(BenchArgs),
    /// List the backends, whether each is available here, and their devices.
    Devices,
    /// Plugin libraries: `kiln plugins list` shows every plugin loaded (with --plugins and
    /// KILN_PLUGIN_PATH), its library and its fields.
    #[command(subcommand)]
    Plugins(PluginsCommand),
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Every registered plugin: `namespace::name@version`, where it came from, its fields.
    List,
}

const COMPARE_HELP: &str = "\
Default tolerances by precision tier, the loosest the builder flags allow:
  fp32 (no --flag)   rtol 1e-5, atol 1e-5  (TF32 is off in compare unless --flag tf32)
  tf32 (--flag tf32) rtol 1e-3, atol 1e-3
  fp16 (--flag fp16) rtol 1e-2, atol 1e-2
  bf16 (--flag bf16) rtol 2e-2, atol 2e-2
An element fails only when |a-r| > atol and |a-r| > rtol*|r| (r: the reference, the last
backend). NaN equals NaN, NaN against a number fails, infinities must match exactly;
integer and bool outputs compare exactly.
Exit status: 0 all within tolerance, 3 results differ, 4 a backend could not build or run
the model (or is not available), 1 any other error.";

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Every entry: key, chosen tactic and each candidate's median time.
    Show {
        file: PathBuf,
    },
    /// Combines two caches of one device into a third (A's entries win on shared keys).
    Merge {
        a: PathBuf,
        b: PathBuf,
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
    },
    /// Sets the chosen tactic of one entry (a candidate's full id or name), in place.
    Edit {
        file: PathBuf,
        key: String,
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
    /// An `.npz` file with one array per network input, keyed by input name. Without it the
    /// inputs are random (ChaCha8, seed 0).
    #[arg(long, value_name = "IN.npz")]
    pub inputs: Option<PathBuf>,
    /// Writes every network output, keyed by output name, to this (uncompressed) `.npz` file.
    #[arg(long, value_name = "OUT.npz")]
    pub save_outputs: Option<PathBuf>,
    /// Dims of dynamic inputs, `name:1x3x224x224[,name2:…]`: used for random inputs and
    /// checked against the `--inputs` arrays; an engine checks them against its profile.
    #[arg(long, value_name = "SHAPES")]
    pub shapes: Option<String>,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
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
    /// A builder flag to set (repeatable): fp16, bf16, tf32, prefer_precision_constraints,
    /// obey_precision_constraints, direct_io. TF32 is on unless `--no-tf32`.
    #[arg(long = "flag", value_name = "FLAG")]
    pub flags: Vec<String>,
    /// Clears the TF32 flag.
    #[arg(long)]
    pub no_tf32: bool,
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
    /// Also prints what the builder decided: layer precisions, and per engine layer (fused
    /// layers named after what they replaced) its tactic and the candidates timed for it.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Most memory one tensor may take, e.g. `8G` or `512M` (default: the device's memory;
    /// the host's for cpu). A tensor the model would make beyond it is an error naming the
    /// layer and its size, not a crash. Recorded in a built engine.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The ONNX model to compare.
    pub model: PathBuf,
    /// Two or more backends, comma-separated; each is compared with the last one (the
    /// reference), e.g. `wgpu,cpu`.
    #[arg(long, value_delimiter = ',', required = true, value_name = "A,B")]
    pub backends: Vec<String>,
    /// An `.npz` file with one array per network input; without it the inputs are random
    /// (ChaCha8, seed 0), the same for every backend.
    #[arg(long, value_name = "IN.npz")]
    pub inputs: Option<PathBuf>,
    /// Dims of dynamic inputs, `name:1x3x224x224[,name2:…]`.
    #[arg(long, value_name = "SHAPES")]
    pub shapes: Option<String>,
    /// Relative tolerance; default: the precision tier's (see below).
    #[arg(long, value_name = "R")]
    pub rtol: Option<f64>,
    /// Absolute tolerance; default: the precision tier's (see below).
    #[arg(long, value_name = "A")]
    pub atol: Option<f64>,
    /// Compares every intermediate tensor (built without optimization passes so none is
    /// fused away) and names the first layer whose output diverges.
    #[arg(long)]
    pub mark_all: bool,
    /// A builder flag for every backend's build (repeatable): fp16, bf16, tf32, …; it also
    /// picks the default tolerances.
    #[arg(long = "flag", value_name = "FLAG")]
    pub flags: Vec<String>,
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
    /// Builds with the FP16 flag (ONNX models only).
    #[arg(long)]
    pub fp16: bool,
    /// Builds with the BF16 flag (ONNX models only).
    #[arg(long)]
    pub bf16: bool,
    /// Builds with TF32 off (ONNX models only).
    #[arg(long)]
    pub no_tf32: bool,
    /// An `.npz` file with the inputs; without it they are random (ChaCha8, seed 0).
    #[arg(long, value_name = "IN.npz")]
    pub inputs: Option<PathBuf>,
    /// Dims of dynamic inputs, `name:1x3x224x224[,name2:…]`.
    #[arg(long, value_name = "SHAPES")]
    pub shapes: Option<String>,
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
    /// Asks the backend not to capture and replay CUDA graphs (no effect on backends
    /// without graphs; the output says so).
    #[arg(long)]
    pub no_cuda_graph: bool,
    /// Writes every figure to this JSON file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
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
    /// The engine file to describe.
    pub engine: PathBuf,
    #[arg(long, value_enum, default_value_t = InspectFormat::Text)]
    pub format: InspectFormat,
    /// Prints the engine inspector's information (TensorRT's `getEngineInformation`) at
    /// this verbosity, capped by the one the engine was built with, instead of the summary.
    #[arg(long, value_enum)]
    pub verbosity: Option<Verbosity>,
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
    let inputs = |model: &'a PathBuf, inputs: &'a Option<PathBuf>| {
        std::iter::once(NamedFile::reads("the model", model)).chain(inputs.iter().map(|p| NamedFile::reads("--inputs", p)))
    };
    match command {
        Command::Run(args) => {
            files.extend(inputs(&args.model, &args.inputs));
            files.extend(args.save_outputs.iter().map(|p| NamedFile::writes("--save-outputs", p)));
        }
        Command::Build(args) => {
            files.push(NamedFile::reads("the model", &args.model));
            files.extend(args.timing_cache.iter().map(|p| NamedFile::updates("--timing-cache", p)));
            files.push(NamedFile::writes("--output", &args.output));
        }
        Command::Compare(args) => {
            files.extend(inputs(&args.model, &args.inputs));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
        }
        Command::Bench(args) => {
            files.extend(inputs(&args.model, &args.inputs));
            files.extend(args.json.iter().map(|p| NamedFile::writes("--json", p)));
            files.extend(args.export_profile.iter().map(|p| NamedFile::writes("--export-profile", p)));
        }
        Command::Cache(CacheCommand::Merge { a, b, output }) => {
            files.extend([NamedFile::reads("cache A", a), NamedFile::reads("cache B", b)]);
            files.push(NamedFile::writes("--output", output));
        }
        Command::Cache(CacheCommand::Edit { file, .. }) => files.push(NamedFile::updates("the cache", file)),
        Command::Cache(CacheCommand::Show { .. }) | Command::Inspect(_) | Command::Devices | Command::Plugins(_) => {}
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
    report::run_reporting_errors(move || {
        let loaded = commands::plugins::load(&cli.plugins)?;
        output_file::check_distinct(&named_files(&cli.command, &loaded))?;
        backends::load_plugin_backends()?;
        let requested = match &cli.command {
            Command::Run(args) => Some(args.backend),
            Command::Build(args) => Some(args.backend),
            Command::Bench(args) => Some(args.backend),
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
            Command::Build(args) => commands::build::build(&args),
            Command::Inspect(args) => commands::inspect::inspect(&args),
            Command::Cache(command) => commands::cache::cache(&command),
            Command::Compare(args) => commands::compare::compare(&args),
            Command::Bench(args) => commands::bench::bench(&args),
            Command::Devices => commands::devices::devices(),
            Command::Plugins(PluginsCommand::List) => commands::plugins::list(&loaded),
        }
    })
}
