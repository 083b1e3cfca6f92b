//! Level tables (explicit quantization, seeds §6.5): a pointwise island after an integer
//! product's levels whose result depends on the level and the output column alone becomes a
//! table in the product's epilogue ([`QuantizedParams::lookup`]).
//!
//! onnxruntime's `quantize_static` quantizes a transformer's products before their bias:
//! `MatMul → QuantizeLinear → DequantizeLinear → Add(bias) → QuantizeLinear`, and the FFN's
//! `… → Add(bias) → Q → DQ → GELU → QuantizeLinear`. [`super::QuantizedChainFusion`] makes each
//! tail one island that reads the levels and the bias; it is still a pass over the product's
//! output. Its value at an element is a function of the element's level (256 values) and of
//! operands that vary along the last axis only, so the builder evaluates the island once at
//! every (column, level), on the folding backend (the island's own arithmetic, as that backend
//! computes it at run time), and the product looks its levels up as it writes them: the
//! levels between are never written, the island never launched.
//!
//! The island qualifies where its inputs are the product's levels (its only reader) and known
//! constants shaped `[…, 1, columns]` or `[…, 1, 1]`, its output is 8-bit and of the levels'
//! shape, and it does not normalize rows. A table costs 256 bytes a column in the engine.
//! `KILN_LEVEL_TABLES=0` turns the pass off, for A/B measurements.

use super::fold::run_on_backend;
use super::graph::{consumers, has_control_flow, known_value, only_reader};
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::fused::{FusedAnchor, PostOp};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::quantized::{QuantizedAnchor, QuantizedParams as Q};
use crate::ir::rewrite::Rewriter;
use crate::ir::tensor::{HostTensor, TensorData};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, Default)]
pub struct LevelTables;

impl Pass for LevelTables {
    fn name(&self) -> &'static str {
        "level-tables"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        let Some(backend) = context.folding_backend else { return Ok(None) };
        // KILN_LEVEL_TABLES=0 leaves the islands as they are (A/B measurements).
        let off = std::env::var("KILN_LEVEL_TABLES").is_ok_and(|v| v == "0");
        if off || !context.quantized_layers || has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        // Keyed by the island, where the folded layer is emitted (its inputs are all earlier).
        let mut folds: HashMap<usize, Fold> = HashMap::new();
        for i in 0..network.layers().len() {
            if let Some(fold) = table_fold(network, &readers, i, backend) {
                folds.insert(fold.island, fold);
            }
        }
        if folds.is_empty() {
            return Ok(None);
        }
        let bytes: usize = folds.values().map(|f| f.table.len()).sum();
        tracing::info!(target: "kiln::builder", "level tables: {} islands after integer products folded into them as per-column tables ({bytes} bytes)", folds.len());
        let products: HashSet<usize> = folds.values().map(|f| f.product).collect();
        let mut rb = Rewriter::new(network);
        for i in 0..network.layers().len() {
            if products.contains(&i) {
                continue;
            }
            let Some(fold) = folds.remove(&i) else {
                rb.keep(i)?;
                continue;
            };
            let product = network.layer(LayerId(fold.product));
            let island = network.layer(LayerId(i));
            let name = format!("{} + {}", product.name, island.name);
            let mut inputs = rb.get_slots(&product.inputs)?;
            inputs.resize(Q::SLOTS, None);
            inputs[Q::LOOKUP] = Some(rb.constant(&format!("{name} (level table)"), fold.table)?);
            rb.add(&name, LayerKind::Quantized(fold.params), inputs, &island.outputs)?;
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

/// An integer product's island folded into it as a table.
struct Fold {
    product: usize,
    island: usize,
    /// The product's parameters with the lookup.
    params: Q,
    table: HostTensor,
}

/// The fold of layer `i`'s island, where `i` is an integer product ending in levels and its
/// levels' one reader is an island of the form above.
fn table_fold(net: &Network, readers: &[Vec<(usize, usize)>], i: usize, backend: &dyn crate::backend::Backend) -> Option<Fold> {
    let l = net.layer(LayerId(i));
    let LayerKind::Quantized(p) = &l.kind else { return None };
    if !matches!(p.anchor, QuantizedAnchor::MatrixMultiply { .. }) || !p.quantized_output() || p.then.is_some() || p.lookup.is_some() {
        return None;
    }
    let levels = l.outputs[0];
    let shape = &net.tensor(levels).shape;
    let columns = shape.dims().last()?.fixed()?;
    let at = only_reader(net, readers, levels)?;
    let island = net.layer(LayerId(at));
    let LayerKind::Fused(f) = &island.kind else { return None };
    let pointwise = matches!(f.anchor, FusedAnchor::Activation(_) | FusedAnchor::Unary(_) | FusedAnchor::Elementwise(_));
    let by_rows = f.epilogue.iter().any(|s| matches!(s, PostOp::Normalization { .. }));
    let out = island.outputs.first().copied()?;
    let to = net.tensor(out).dtype;
    if !pointwise || by_rows || island.outputs.len() != 1 || !to.is_8bit_integer() || net.tensor(out).shape != *shape {
        return None;
    }
    // The levels at every (level, column): row b holds byte b in every column.
    let bytes = Q::LOOKUP_ROW;
    let probe = match net.tensor(levels).dtype {
        DataType::I8 => TensorData::I8((0..bytes * columns).map(|j| (j / columns) as u8 as i8).collect()),
        DataType::U8 => TensorData::U8((0..bytes * columns).map(|j| (j / columns) as u8).collect()),
        _ => return None,
    };
    let probe = Arc::new(HostTensor::new(vec![bytes, columns], probe).ok()?);
    let mut values = Vec::with_capacity(island.inputs.len());
    let mut reads_levels = false;
    for slot in &island.inputs {
        values.push(match *slot {
            None => None,
            Some(t) if t == levels => {
                reads_levels = true;
                Some(probe.clone())
            }
            Some(t) => Some(Arc::new(per_column(net, t, columns, shape.rank())?.clone())),
        });
    }
    if !reads_levels {
        return None;
    }
    let [looked] = <[HostTensor; 1]>::try_from(run_on_backend(backend, island, &values)?).ok()?;
    if looked.dtype() != to || looked.len() != bytes * columns {
        return None;
    }
    Some(Fold { product: i, island: at, params: Q { lookup: Some(to), ..p.clone() }, table: by_column(&looked, columns)? })
}

/// The known value of `t` where it varies along the last of `rank` axes only (one value, or
/// one per column there).
fn per_column(net: &Network, t: TensorId, columns: usize, rank: usize) -> Option<&HostTensor> {
    let v = known_value(net, t)?;
    let dims = v.shape();
    let leading_ones = dims.iter().rev().skip(1).all(|&d| d == 1);
    let last_fits = dims.last().is_none_or(|&d| d == 1 || d == columns);
    (dims.len() <= rank && leading_ones && last_fits).then_some(v)
}

/// The island's `[256, columns]` values (any leading ones) as the `[columns, 256]` table.
fn by_column(looked: &HostTensor, columns: usize) -> Option<HostTensor> {
    let bytes = Q::LOOKUP_ROW;
    let at = |j: usize| (j % bytes) * columns + j / bytes;
    let data = match looked.data() {
        TensorData::I8(v) => TensorData::I8((0..v.len()).map(|j| v[at(j)]).collect()),
        TensorData::U8(v) => TensorData::U8((0..v.len()).map(|j| v[at(j)]).collect()),
        _ => return None,
    };
    HostTensor::new(vec![columns, bytes], data).ok()
}
