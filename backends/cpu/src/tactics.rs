//! The cpu backend's tactics: two implementations each of float convolution (im2col +
//! GEMM, direct loops) and float matrix multiply (matrixmultiply sgemm, blocked loops),
//! also offered for fused layers headed by them, plus the 2:4 sparse product for weights
//! that qualify in a SPARSE_WEIGHTS build; one default tactic for everything else.

use crate::kernels::{self, Variant};
use kiln::ir::infer::{infer_layer, Fact};
use kiln::tactics::{TacticDesc, TacticId};
use kiln::{BackendError, DataType, FusedAnchor, HostTensor, LayerId, LayerKind, MathMode, Network, Shape, TensorFormat};
use std::time::{Duration, Instant};

/// Kernel sources hashed into the tactic ids: an edited kernel gets a new id, so a timing
/// cache never serves a time measured on other code.
const CONV_SOURCE: &str = include_str!("kernels/conv.rs");
const MATMUL_SOURCE: &str = include_str!("kernels/matmul.rs");
const ALT_SOURCE: &str = include_str!("kernels/alt.rs");
const SPARSE_SOURCE: &str = include_str!("kernels/sparse.rs");
/// The 2:4 sparse product ([`kiln::sparsity::TACTIC_PREFIX`] names it sparse).
const SPARSE_PRODUCT: (&str, Variant, &str) = ("sparse_matmul_2_4", Variant::Sparse, SPARSE_SOURCE);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Convolution,
    MatrixMultiply,
}

/// (name, variant, source) of each tactic of a family, primary first.
fn family_tactics(family: Family) -> [(&'static str, Variant, &'static str); 2] {
    match family {
        Family::Convolution => {
            [("conv_im2col_gemm", Variant::Primary, CONV_SOURCE), ("conv_direct", Variant::Alternate, ALT_SOURCE)]
        }
        Family::MatrixMultiply => {
            [("matmul_sgemm", Variant::Primary, MATMUL_SOURCE), ("matmul_blocked", Variant::Alternate, ALT_SOURCE)]
        }
    }
}

fn family_of(network: &Network, layer: LayerId) -> Option<Family> {
    let l = network.layer(layer);
    let family = match &l.kind {
        LayerKind::Convolution(_) | LayerKind::Fused(kiln::FusedParams { anchor: FusedAnchor::Convolution(_), .. }) => {
            Family::Convolution
        }
        LayerKind::MatrixMultiply { .. }
        | LayerKind::Fused(kiln::FusedParams { anchor: FusedAnchor::MatrixMultiply { .. }, .. }) => Family::MatrixMultiply,
        _ => return None,
    };
    // Integer products have one kernel; a layer of unknown shapes cannot be timed.
    let first = network.tensor((*l.inputs.first()?)?);
    let timeable = l.inputs.iter().flatten().all(|&t| network.tensor(t).shape.dims().iter().all(|d| d.fixed().is_some()));
    (first.dtype.is_float() && timeable).then_some(family)
}

pub fn tactics(network: &Network, layer: LayerId, math: MathMode) -> Vec<TacticDesc> {
    let Some(family) = family_of(network, layer) else { return vec![TacticDesc::default_for("cpu")] };
    let dtypes = vec![DataType::F32, DataType::F16, DataType::BF16];
    let sparse = family == Family::MatrixMultiply && math.sparse_weights && kiln::sparsity::is_eligible(network, layer);
    family_tactics(family)
        .into_iter()
        .chain(sparse.then_some(SPARSE_PRODUCT))
        .map(|(name, _, source)| TacticDesc {
            id: TacticId::new("cpu", name, source.as_bytes()),
            workspace_bytes: 0,
            formats: vec![TensorFormat::Linear],
            dtypes: dtypes.clone(),
        })
        .collect()
}

/// The implementation a recorded tactic selects; unknown or absent ids run the primary.
pub fn variant_of(network: &Network, layer: LayerId, tactic: Option<&TacticId>) -> Variant {
    let (Some(family), Some(tactic)) = (family_of(network, layer), tactic) else { return Variant::Primary };
    family_tactics(family)
        .into_iter()
        .chain((family == Family::MatrixMultiply).then_some(SPARSE_PRODUCT))
        .find(|(name, _, source)| TacticId::new("cpu", name, source.as_bytes()) == *tactic)
        .map_or(Variant::Primary, |(_, v, _)| v)
}

/// One warm-up run, then the median of `repetitions` runs on random inputs.
pub fn time_tactic(network: &Network, layer: LayerId, tactic: &TacticDesc, repetitions: usize) -> Result<Duration, BackendError> {
    let l = network.layer(layer);
    let fail = |reason: String| BackendError::Execution { layer: l.name.clone(), reason };
    let variant = variant_of(network, layer, Some(&tactic.id));
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut inputs = Vec::with_capacity(l.inputs.len());
    for slot in &l.inputs {
        inputs.push(match slot {
            None => None,
            Some(t) => Some(random_tensor(network.tensor(*t).dtype, &network.tensor(*t).shape, &mut seed).map_err(&fail)?),
        });
    }
    let views: Vec<Option<&HostTensor>> = inputs.iter().map(Option::as_ref).collect();
    let shapes: Vec<Option<Shape>> = views.iter().map(|x| x.map(|x| Shape::fixed(x.shape()))).collect();
    let facts: Vec<Option<Fact>> = views
        .iter()
        .zip(&shapes)
        .map(|(x, s)| x.zip(s.as_ref()).map(|(x, s)| Fact::new(x.dtype(), s, None)))
        .collect();
    let outs = infer_layer(&l.kind, &facts, &|w| network.weights_blob(w)).map_err(|e| fail(e.rule))?;
    kernels::run(&l.kind, &views, &outs, variant).map_err(&fail)?;
    let mut times = Vec::with_capacity(repetitions.max(1));
    for _ in 0..repetitions.max(1) {
        let start = Instant::now();
        kernels::run(&l.kind, &views, &outs, variant).map_err(&fail)?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// [`kiln::plan::timing::random_tensor`] of a layer input's fixed shape.
fn random_tensor(dtype: DataType, shape: &Shape, seed: &mut u64) -> Result<HostTensor, String> {
    let dims: Vec<usize> = shape.dims().iter().map(|d| d.fixed().ok_or("a dynamic dim cannot be timed")).collect::<Result<_, _>>()?;
    kiln::plan::timing::random_tensor(dtype, &dims, seed)
}
