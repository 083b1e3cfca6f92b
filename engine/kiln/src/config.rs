//! Build settings: the builder configuration, its flags and the inspector verbosity it
//! records. A leaf of the core crate's module graph (it names the tactic options and
//! profiles it holds, nothing that reads it).

use crate::ir::dtype::DataType;
use crate::profile::OptimizationProfile;
use crate::tactics::{AlgorithmSelector, SelectorHandle, TacticOptions, TimingCache};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// Builder settings. Reduced precision, profiles and the timing cache arrive with the
/// builder issue; the fields here are what the foundation honours.
#[derive(Clone, Debug, Default)]
pub struct BuilderConfig {
    /// Free-form flags recorded in the engine (shown by `kiln inspect`).
    pub flags: Vec<String>,
    /// Most iterations one run of a loop may take before execution fails (a runaway WHILE
    /// loop becomes an error, not a hang); `None`: [`crate::ir::control::DEFAULT_MAX_TRIP_COUNT`]. Recorded in
    /// the engine.
    pub max_trip_count: Option<u64>,
    /// Optimization profiles (min / opt / max shapes of the dynamic inputs); an engine can
    /// hold several and a context picks one. See [`crate::profile`] for a network with
    /// dynamic inputs and none.
    pub profiles: Vec<OptimizationProfile>,
    /// Most bytes the activation arena may take (at any profile's max shapes); `None`: no
    /// limit. A plan that needs more fails the build.
    pub workspace_limit_bytes: Option<u64>,
    /// Most bytes one tensor may take, at build time (static shapes and every profile's
    /// max shapes) and when the engine runs (shapes decided by values); `None`: what the
    /// machine has ([`crate::limits`]). Recorded in the engine. A tensor over it is an
    /// error naming the layer, not an allocation that aborts the process.
    pub max_memory_bytes: Option<u64>,
    /// Whether the optimization passes run ([`crate::passes::Pipeline::standard`]); off,
    /// the network is built as given (dead layers aside), e.g. to compare results.
    pub optimization: Optimization,
    /// Precision, constraint and I/O flags (TF32 on by default); see
    /// [`BuilderConfig::set_flag`].
    pub builder_flags: BuilderFlags,
    /// How much the engine inspector shows (recorded in the engine).
    pub profiling_verbosity: ProfilingVerbosity,
    /// Timing cache, algorithm selector and the tactic flags (DISABLE_TIMING_CACHE,
    /// ERROR_ON_TIMING_CACHE_MISS, REJECT_EMPTY_ALGORITHMS); see [`crate::tactics`].
    pub tactics: TacticOptions,
    /// With [`BuilderFlag::Int8`]: ranges measured by calibration ([`crate::quant::calibrate`]
    /// or a calibration cache), by tensor name; ranges set on the network win.
    pub int8_calibration: Option<Arc<crate::quant::CalibrationTable>>,
}

impl BuilderConfig {
    /// Attaches a timing cache (seed §6.1); the build reads and grows it. Returns the
    /// shared handle, whose cache can be serialized after the build.
    pub fn set_timing_cache(&mut self, cache: TimingCache, ignore_mismatch: bool) -> Arc<Mutex<TimingCache>> {
        let shared = Arc::new(Mutex::new(cache));
        self.tactics.timing_cache = Some(Arc::clone(&shared));
        self.tactics.ignore_mismatch = ignore_mismatch;
        shared
    }

    /// A copy of the attached timing cache, as the last build left it.
    pub fn timing_cache(&self) -> Option<TimingCache> {
        self.tactics.timing_cache.as_ref().map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Attaches an algorithm selector (seed §6.3).
    pub fn set_algorithm_selector(&mut self, selector: Arc<dyn AlgorithmSelector>) {
        self.tactics.selector = Some(SelectorHandle(selector));
    }
}

/// Whether the builder rewrites the network before building.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Optimization {
    /// Dead-layer elimination only.
    None,
    /// Folding, pattern recognition and fusion.
    #[default]
    Full,
}

/// A builder flag (TensorRT's `BuilderFlag`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BuilderFlag {
    /// Layers may compute in f16.
    Fp16,
    /// Layers may compute in bf16.
    Bf16,
    /// f32 matrix products and convolutions may use TF32 (on by default; the environment
    /// variable `NVIDIA_TF32_OVERRIDE=0` at build time turns it off).
    Tf32,
    /// Honour layer precision constraints where possible; warn and use the fastest
    /// implementation where not.
    PreferPrecisionConstraints,
    /// Honour layer precision constraints or fail the build.
    ObeyPrecisionConstraints,
    /// Insert no reformat at the network boundary: fail the build when the backend cannot
    /// consume a boundary format directly (seed §6.6).
    DirectIo,
    /// The engine keeps what a refit needs: the network as given, so that new weights go
    /// through the same folding and fusion (seed §6.2, [`crate::refit::Refitter`]).
    Refit,
    /// With `Refit`: the engine file leaves out the refittable weights (and the weights
    /// derived from them); it runs only once refitted (TensorRT's weight-stripped plans).
    StripWeights,
    /// Convolutions and matrix products read INT8 inputs where every activation they read has
    /// a range (set on the network or from calibration, [`BuilderConfig::int8_calibration`]);
    /// see [`crate::quant`].
    Int8,
    /// Convolutions and matrix products whose constant weights have two zeros in every four
    /// input channels may run on 2:4 sparse kernels where the backend has them and they are
    /// faster (seed §6.9, [`crate::sparsity`]).
    SparseWeights,
}

impl BuilderFlag {
    pub const ALL: [BuilderFlag; 10] = [
        BuilderFlag::Fp16,
        BuilderFlag::Bf16,
        BuilderFlag::Tf32,
        BuilderFlag::PreferPrecisionConstraints,
        BuilderFlag::ObeyPrecisionConstraints,
        BuilderFlag::DirectIo,
        BuilderFlag::Refit,
        BuilderFlag::StripWeights,
        BuilderFlag::Int8,
        BuilderFlag::SparseWeights,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BuilderFlag::Fp16 => "FP16",
            BuilderFlag::Bf16 => "BF16",
            BuilderFlag::Tf32 => "TF32",
            BuilderFlag::PreferPrecisionConstraints => "PREFER_PRECISION_CONSTRAINTS",
            BuilderFlag::ObeyPrecisionConstraints => "OBEY_PRECISION_CONSTRAINTS",
            BuilderFlag::DirectIo => "DIRECT_IO",
            BuilderFlag::Refit => "REFIT",
            BuilderFlag::StripWeights => "STRIP_WEIGHTS",
            BuilderFlag::Int8 => "INT8",
            BuilderFlag::SparseWeights => "SPARSE_WEIGHTS",
        }
    }

    /// Parses a name, case-insensitive (`fp16`, `prefer_precision_constraints`, …).
    pub fn from_name(name: &str) -> Option<BuilderFlag> {
        let upper = name.to_ascii_uppercase().replace('-', "_");
        BuilderFlag::ALL.into_iter().find(|f| f.name() == upper)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of builder flags; the default holds TF32 only, as TensorRT's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BuilderFlags(u32);

impl Default for BuilderFlags {
    fn default() -> BuilderFlags {
        BuilderFlags(BuilderFlag::Tf32.bit())
    }
}

impl BuilderFlags {
    pub fn empty() -> BuilderFlags {
        BuilderFlags(0)
    }

    pub fn contains(self, flag: BuilderFlag) -> bool {
        self.0 & flag.bit() != 0
    }

    pub fn set(&mut self, flag: BuilderFlag) {
        self.0 |= flag.bit();
    }

    pub fn clear(&mut self, flag: BuilderFlag) {
        self.0 &= !flag.bit();
    }

    /// How an engine built with these flags may compute f32 (its TF32 flag).
    pub fn math_mode(self) -> crate::backend::MathMode {
        crate::backend::MathMode {
            tf32: self.contains(BuilderFlag::Tf32),
            sparse_weights: self.contains(BuilderFlag::SparseWeights),
        }
    }

    /// The flags held, in [`BuilderFlag::ALL`] order.
    pub fn flags(self) -> Vec<BuilderFlag> {
        BuilderFlag::ALL.into_iter().filter(|&f| self.contains(f)).collect()
    }

    /// Names joined by `|`, `(none)` when empty.
    pub fn names(self) -> String {
        let names: Vec<&str> = self.flags().into_iter().map(BuilderFlag::name).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join("|")
        }
    }

    /// Whether layers may compute in `dtype` (f32 always; f16/bf16 when their flag is set).
    pub fn enables(self, dtype: DataType) -> bool {
        match dtype {
            DataType::F16 => self.contains(BuilderFlag::Fp16),
            DataType::BF16 => self.contains(BuilderFlag::Bf16),
            _ => true,
        }
    }
}

impl BuilderConfig {
    pub fn set_flag(&mut self, flag: BuilderFlag) {
        self.builder_flags.set(flag);
    }

    pub fn clear_flag(&mut self, flag: BuilderFlag) {
        self.builder_flags.clear(flag);
    }

    pub fn get_flag(&self, flag: BuilderFlag) -> bool {
        self.builder_flags.contains(flag)
    }
}

/// The flags a build uses: the configured ones less TF32 when `NVIDIA_TF32_OVERRIDE` is
/// `0` (`tf32_override` is that variable's value, read by the builder), with a log line
/// saying so.
pub fn effective_flags(configured: BuilderFlags, tf32_override: Option<&str>) -> (BuilderFlags, Option<String>) {
    let mut flags = configured;
    if tf32_override == Some("0") && flags.contains(BuilderFlag::Tf32) {
        flags.clear(BuilderFlag::Tf32);
        return (flags, Some("TF32 disabled: NVIDIA_TF32_OVERRIDE=0 at build time".into()));
    }
    (flags, None)
}

/// How much the inspector may show (TensorRT's `ProfilingVerbosity`), set in the builder
/// config and recorded in the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProfilingVerbosity {
    /// Nothing.
    None,
    /// Layer names only (the default).
    #[default]
    LayerNamesOnly,
    /// Everything: types, shapes, formats, parameters, kernels.
    Detailed,
}

impl ProfilingVerbosity {
    pub fn name(self) -> &'static str {
        match self {
            ProfilingVerbosity::None => "none",
            ProfilingVerbosity::LayerNamesOnly => "layer_names_only",
            ProfilingVerbosity::Detailed => "detailed",
        }
    }
}

