//! The builder-flag options every command that builds takes alike: `--fp16`, `--bf16`,
//! `--int8`, `--no-tf32`, `--flag NAME` and `--sparsity MODE`.

use anyhow::bail;
use kiln::{BuilderConfig, BuilderFlag};

#[derive(Debug, clap::Args)]
pub struct PrecisionOptions {
    /// Lets layers compute in FP16 where the backend runs them faster (the FP16 builder flag;
    /// a warning says so when no layer does).
    #[arg(long)]
    pub fp16: bool,
    /// Lets layers compute in BF16 where the backend runs them faster (the BF16 builder flag).
    #[arg(long)]
    pub bf16: bool,
    /// Lets convolutions and matrix products read INT8 inputs where their ranges are known
    /// (the INT8 builder flag; `kiln build --calib DIR` measures them).
    #[arg(long)]
    pub int8: bool,
    /// Clears the TF32 builder flag: f32 matrix products and convolutions stay exact f32 on
    /// cuda (with the flag, the default, they round their inputs to TF32 on tensor cores;
    /// cpu and wgpu compute f32 exactly either way).
    #[arg(long)]
    pub no_tf32: bool,
    /// A builder flag to set (repeatable): fp16, bf16, tf32, prefer_precision_constraints,
    /// obey_precision_constraints, direct_io, refit (the engine can take new weights: `kiln
    /// refit`), strip_weights (with refit: the engine file leaves the weights out), int8
    /// (convolutions and products read INT8 inputs where ranges are known: `--calib`),
    /// sparse_weights (weights with two zeros in every four input channels may run on 2:4
    /// sparse kernels).
    #[arg(long = "flag", value_name = "FLAG")]
    pub flags: Vec<String>,
    /// 2:4 structured sparsity, as trtexec's `--sparsity`: `enable` sets the SPARSE_WEIGHTS
    /// flag; `force` also prunes every convolution's and product's weights to 2:4 first (the
    /// two largest of every four input channels stay), to measure what sparse kernels gain:
    /// the pruned model no longer gives the original's answer.
    #[arg(long, value_enum, value_name = "MODE")]
    pub sparsity: Option<Sparsity>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sparsity {
    Disable,
    Enable,
    Force,
}

impl PrecisionOptions {
    /// Whether any option is given (an engine file was built already: they cannot apply).
    pub fn any(&self) -> bool {
        self.fp16 || self.bf16 || self.int8 || self.no_tf32 || !self.flags.is_empty() || self.sparsity.is_some()
    }

    /// The network to build: with `--sparsity force`, its weights pruned to 2:4 (a warning on
    /// stderr names how many layers changed).
    pub fn network_to_build(&self, network: kiln::Network) -> anyhow::Result<kiln::Network> {
        if self.sparsity != Some(Sparsity::Force) {
            return Ok(network);
        }
        let (pruned, layers) = kiln::sparsity::prune_network(&network).map_err(|e| anyhow::anyhow!("--sparsity force: {e}"))?;
        eprintln!(
            "warning: --sparsity force pruned the weights of {} layers to 2:4: results differ from the model's",
            layers.len()
        );
        Ok(pruned)
    }

    /// Sets the flags on `config`; `--no-tf32` wins over `--flag tf32`.
    pub fn apply(&self, config: &mut BuilderConfig) -> anyhow::Result<()> {
        for name in &self.flags {
            let Some(flag) = BuilderFlag::from_name(name) else {
                let known: Vec<&str> = BuilderFlag::ALL.iter().map(|f| f.name()).collect();
                bail!("unknown builder flag `{name}` (known: {})", known.join(", ").to_lowercase());
            };
            config.set_flag(flag);
        }
        if self.fp16 {
            config.set_flag(BuilderFlag::Fp16);
        }
        if self.bf16 {
            config.set_flag(BuilderFlag::Bf16);
        }
        if self.int8 {
            config.set_flag(BuilderFlag::Int8);
        }
        if self.no_tf32 {
            config.clear_flag(BuilderFlag::Tf32);
        }
        match self.sparsity {
            Some(Sparsity::Enable | Sparsity::Force) => config.set_flag(BuilderFlag::SparseWeights),
            Some(Sparsity::Disable) => config.clear_flag(BuilderFlag::SparseWeights),
            None => {}
        }
        Ok(())
    }

    /// The error for options given with an engine file.
    pub fn refuse_for_engine(&self, path: &std::path::Path, built_with: &str) -> anyhow::Result<()> {
        if self.any() {
            bail!(
                "--fp16, --bf16, --int8, --no-tf32, --flag and --sparsity apply when building from ONNX; `{}` is an engine built with flags {built_with}",
                path.display()
            );
        }
        Ok(())
    }
}
