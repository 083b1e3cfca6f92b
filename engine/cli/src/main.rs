//! `kiln`: builds, runs and inspects kiln inference engines from the command line.
//!
//! Every failure ends as one `error: …` line on stderr and a non-zero exit status; a panic
//! is a bug and is reported the same way (exit status 101) instead of a backtrace dump.
#![forbid(unsafe_code)]

mod backends;
mod commands;
mod inputs;
mod model;
mod npz;
mod report;
mod shapes;
mod summary;

use backends::BackendChoice;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "kiln", version, about = "Build, run and inspect kiln inference engines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

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
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
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
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The ONNX model to build.
    pub model: PathBuf,
    /// Where to write the engine file.
    #[arg(short, long, value_name = "ENGINE")]
    pub output: PathBuf,
    /// The backend to build for; `auto` takes the first available of cuda, wgpu, cpu.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
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
    /// A timing cache file: read if it exists, grown by the build and written back.
    #[arg(long, value_name = "FILE")]
    pub timing_cache: Option<PathBuf>,
    /// Fails the build when a layer is not in the timing cache.
    #[arg(long)]
    pub error_on_timing_cache_miss: bool,
    /// Uses a timing cache made on another device or kiln version (with a warning).
    #[arg(long)]
    pub ignore_timing_cache_mismatch: bool,
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(usage) => return report::usage_error(usage),
    };
    report::run_reporting_errors(move || match cli.command {
        Command::Run(args) => commands::run::run(&args),
        Command::Build(args) => commands::build::build(&args),
        Command::Inspect(args) => commands::inspect::inspect(&args),
        Command::Cache(command) => commands::cache::cache(&command),
    })
}
