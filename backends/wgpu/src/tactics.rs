//! Tactics: the tile variants of the register-tiled matrix kernel ([`crate::gemm`]) for a
//! MatrixMultiply (plain or heading a fused layer) whose shapes fit it, timed by the
//! builder with GPU timestamps and kept in kiln's shared timing cache. One default tactic
//! elsewhere.
//!
//! The chosen variants are kept per executable, by product shape (M, N, K), and handed to
//! each execution's recorder for the matmul launcher; a product its engine did not choose
//! for takes [`crate::gemm::default_kernel`]. Two engines in one process never see each
//! other's choices.

use crate::gemm::{self, GemmChoices, GemmKernel, GemmShape, Product, F32_TACTICS};
use kiln::tactics::{TacticDesc, TacticId};
use kiln::{BackendError, DataType, FusedAnchor, LayerId, LayerKind, MatrixOp, Network, TensorFormat};
use std::time::Duration;

const NAME: &str = "wgpu";


/// The tactic id of a variant: its name and generated source (an edited generator never
/// reuses a stale timing).
pub fn tactic_id(kernel: &GemmKernel) -> TacticId {
    TacticId::new(NAME, &kernel.name(), kernel.source().as_bytes())
}


/// The product `layer` computes, when the gemm kernel fits it.
pub fn product(network: &Network, layer: LayerId) -> Option<Product> {
    let l = network.layer(layer);
    let (op_a, op_b) = match &l.kind {
        LayerKind::MatrixMultiply { op_a, op_b } => (*op_a, *op_b),
        LayerKind::Fused(p) => match &p.anchor {
            FusedAnchor::MatrixMultiply { op_a, op_b } => (*op_a, *op_b),
            _ => return None,
        },
        _ => return None,
    };
    if op_a != MatrixOp::None || op_b != MatrixOp::None {
        return None;
    }
    let dims = |slot: usize| -> Option<Vec<usize>> {
        let t = network.tensor(l.inputs.get(slot).copied().flatten()?);
        if !t.dtype.is_float() {
            return None;
        }
        t.shape.dims().iter().map(|d| d.fixed()).collect()
    };
    let (a, b) = (dims(0)?, dims(1)?);
    let out: Vec<usize> = network.tensor(*l.outputs.first()?).shape.dims().iter().map(|d| d.fixed()).collect::<Option<_>>()?;
    if a.len() < 2 || b.len() < 2 || out.len() < 2 {
        return None;
    }
    let (m, k, n) = (a[a.len() - 2], a[a.len() - 1], b[b.len() - 1]);
    let shape = GemmShape { m, n, k, a_row_stride: k, a_col_stride: 1, b_row_stride: n, b_col_stride: 1 };
    let batches = out[..out.len() - 2].iter().product();
    (shape.fits() && b[b.len() - 2] == k && m > 0 && n > 0).then_some(Product { m, n, k, batches })
}

pub fn tactics(network: &Network, layer: LayerId) -> Vec<TacticDesc> {
    if product(network, layer).is_none() {
        return vec![TacticDesc::default_for(NAME)];
    }
    F32_TACTICS
        .iter()
        .map(|kernel| TacticDesc {
            id: tactic_id(kernel),
            workspace_bytes: 0,
            formats: vec![TensorFormat::Linear],
            dtypes: vec![DataType::F32, DataType::F16, DataType::BF16],
        })
        .collect()
}

/// The variant a recorded tactic names, if any.
pub fn kernel_of(tactic: &TacticId) -> Option<GemmKernel> {
    F32_TACTICS.iter().copied().find(|k| tactic_id(k) == *tactic)
}

/// Median GPU time of `repetitions` runs of the variant `tactic` names on random inputs of
/// the layer's shapes.
pub fn time_tactic(
    network: &Network,
    layer: LayerId,
    tactic: &TacticDesc,
    repetitions: usize,
) -> Result<Duration, BackendError> {
    let l = network.layer(layer);
    let fail = |reason: String| BackendError::Execution { layer: l.name.clone(), reason };
    let p = product(network, layer).ok_or_else(|| fail("not a product the gemm kernel runs".into()))?;
    let kernel = kernel_of(&tactic.id).ok_or_else(|| fail(format!("unknown wgpu tactic {}", tactic.id)))?;
    let t = crate::bench::time_gemm_batched(p, repetitions.max(1), kernel).map_err(|e| fail(e.to_string()))?;
    Ok(Duration::from_secs_f64(t.median_ms * 1e-3))
}

/// The variant each timed product chose, for the launcher.
pub fn adopt(network: &Network, tactics: &[Option<TacticId>]) -> GemmChoices {
    let mut table = GemmChoices::new();
    for (i, tactic) in tactics.iter().enumerate() {
        let Some(tactic) = tactic else { continue };
        let layer = LayerId(i);
        if let (Some(p), Some(kernel)) = (product(network, layer), kernel_of(tactic)) {
            table.insert((p.m, p.n, p.k), kernel);
        }
    }
    table
}

/// The variant the launcher runs for an `m×k · k×n` product.
pub fn kernel_for(choices: &GemmChoices, m: usize, n: usize, k: usize) -> GemmKernel {
    choices.get(&(m, n, k)).copied().unwrap_or_else(|| gemm::default_kernel(m, n))
}
