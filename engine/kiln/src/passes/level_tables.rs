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
//!
//! A packed in-projection (`nn.MultiheadAttention`) splits its product's levels into Q, K and
//! V by layout layers and Slices (Q/DQ propagation moved them onto the levels), and each part
//! has its own island. Where every reader on the way is such a layer or such an island, and
//! each island's columns are a run of the product's (followed as a bias is moved through the
//! same layers), one table holds each column's island's row: the product writes what the
//! islands wrote, and the layers after it move those levels.
//! `KILN_LEVEL_TABLES=0` turns the pass off, for A/B measurements.

use super::fold::run_on_backend;
use super::graph::{consumers, has_control_flow, known_value, moves_elements, only_reader};
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
        // Keyed by the island, where the folded layer is emitted (its inputs are all earlier);
        // a split's fold by its product, emitted there (the layers moving its levels read it).
        let mut folds: HashMap<usize, Fold> = HashMap::new();
        let mut split_folds: HashMap<usize, SplitFold> = HashMap::new();
        for i in 0..network.layers().len() {
            if let Some(fold) = table_fold(network, &readers, i, backend) {
                folds.insert(fold.island, fold);
            } else if let Some(fold) = split_table_fold(network, &readers, i, backend) {
                split_folds.insert(i, fold);
            }
        }
        if folds.is_empty() && split_folds.is_empty() {
            return Ok(None);
        }
        let bytes: usize = folds.values().map(|f| f.table.len()).chain(split_folds.values().map(|f| f.table.len())).sum();
        let split_islands: usize = split_folds.values().map(|f| f.islands.len()).sum();
        tracing::info!(target: "kiln::builder", "level tables: {} islands after integer products folded into them as per-column tables, {split_islands} of them after their product's levels were split ({bytes} bytes)", folds.len() + split_islands);
        let products: HashSet<usize> = folds.values().map(|f| f.product).collect();
        // A split's islands: each one's output is now its input, the looked-up levels moved.
        let dropped: HashMap<usize, TensorId> = split_folds.values().flat_map(|f| f.islands.iter().copied()).collect();
        let mut rb = Rewriter::new(network);
        for i in 0..network.layers().len() {
            if products.contains(&i) {
                continue;
            }
            if let Some(&input) = dropped.get(&i) {
                let to = rb.get(input)?;
                rb.alias(network.layer(LayerId(i)).outputs[0], to);
                continue;
            }
            if let Some(fold) = split_folds.remove(&i) {
                let product = network.layer(LayerId(i));
                let mut inputs = rb.get_slots(&product.inputs)?;
                inputs.resize(Q::SLOTS, None);
                inputs[Q::LOOKUP] = Some(rb.constant(&format!("{} (level table of its split)", product.name), fold.table)?);
                rb.add(&format!("{} + the islands after its split", product.name), LayerKind::Quantized(fold.params), inputs, &product.outputs)?;
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

/// A product's fold across a split: its levels reach each island through layout layers and
/// Slices, which now move the looked-up levels.
struct SplitFold {
    /// Each island and the tensor it read.
    islands: Vec<(usize, TensorId)>,
    params: Q,
    table: HostTensor,
}

/// Layer `i` when it is an integer product ending in levels without a table: its parameters
/// and its levels.
fn leveled_product(net: &Network, i: usize) -> Option<(&Q, TensorId)> {
    let l = net.layer(LayerId(i));
    let LayerKind::Quantized(p) = &l.kind else { return None };
    if !matches!(p.anchor, QuantizedAnchor::MatrixMultiply { .. }) || !p.quantized_output() || p.then.is_some() || p.lookup.is_some() {
        return None;
    }
    Some((p, l.outputs[0]))
}

/// The fold of layer `i`'s island, where `i` is an integer product ending in levels and its
/// levels' one reader is an island of the form above.
fn table_fold(net: &Network, readers: &[Vec<(usize, usize)>], i: usize, backend: &dyn crate::backend::Backend) -> Option<Fold> {
    let (p, levels) = leveled_product(net, i)?;
    let at = only_reader(net, readers, levels)?;
    let (to, table) = island_table(net, at, levels, backend)?;
    Some(Fold { product: i, island: at, params: Q { lookup: Some(to), ..p.clone() }, table })
}

/// The fold of the islands after product `i`'s levels are split (a packed in-projection's
/// Q, K and V): every reader of the levels, and of each tensor moving them, is a layout layer,
/// a Slice or an island of the form above whose columns are a run of the product's columns
/// (the layers keep the last axis innermost). One table of the product's columns holds each
/// column's island's row; a column no island reads keeps its level.
fn split_table_fold(net: &Network, readers: &[Vec<(usize, usize)>], i: usize, backend: &dyn crate::backend::Backend) -> Option<SplitFold> {
    let (p, levels) = leveled_product(net, i)?;
    let shape = &net.tensor(levels).shape;
    let (columns, rank, dtype) = (shape.dims().last()?.fixed()?, shape.rank(), net.tensor(levels).dtype);
    // Each tensor on the way, with the product's column of each element of a tensor of `dims`
    // that broadcasts onto it (`broadcast_through_layout`'s form: the columns move as a bias would).
    let mut dims = vec![1; rank];
    dims[rank - 1] = columns;
    let mut stack = vec![(levels, dims, (0..columns).collect::<Vec<usize>>())];
    let (mut islands, mut moved) = (Vec::new(), false);
    while let Some((t, dims, cols)) = stack.pop() {
        if net.outputs().contains(&t) || readers[t.0].is_empty() {
            return None;
        }
        for &(r, slot) in &readers[t.0] {
            let layer = net.layer(LayerId(r));
            if moves_elements(layer) && slot == 0 {
                let (next, indices) = super::qdq_propagation::broadcast_through_layout(net, r, &dims)?;
                stack.push((layer.outputs[0], next, indices.iter().map(|&k| cols[k]).collect()));
                moved = true;
            } else {
                // The island's columns: its input's last axis, one product column each.
                let last = net.tensor(t).shape.dims().last()?.fixed()?;
                let (lead, tail) = dims.split_at(dims.len().checked_sub(1)?);
                (lead.iter().all(|&d| d == 1) && tail == [last] && readers[t.0].len() == 1).then_some(())?;
                islands.push((r, t, cols.clone()));
            }
        }
    }
    if !moved || islands.is_empty() {
        return None;
    }
    let row = Q::LOOKUP_ROW;
    let mut rows: Vec<Option<HostTensor>> = vec![None; columns];
    let mut to = None;
    for &(island, t, ref cols) in &islands {
        let (island_to, table) = island_table(net, island, t, backend)?;
        if *to.get_or_insert(island_to) != island_to {
            return None;
        }
        for (j, &c) in cols.iter().enumerate() {
            let part = HostTensor::new(vec![row], table.data().gather(&(j * row..(j + 1) * row).collect::<Vec<_>>())).ok()?;
            rows[c].replace(part).is_none().then_some(())?;
        }
    }
    // The layers after the product keep their type: the islands write the levels' type.
    let to = to.filter(|&to| to == dtype)?;
    let identity = HostTensor::new(vec![row], every_level(dtype, 1)?).ok()?;
    let rows: Vec<HostTensor> = rows.into_iter().map(|r| r.unwrap_or_else(|| identity.clone())).collect();
    let data = TensorData::concat(&rows.iter().map(HostTensor::data).collect::<Vec<_>>())?;
    let table = HostTensor::new(vec![columns, row], data).ok()?;
    Some(SplitFold { islands: islands.into_iter().map(|(island, t, _)| (island, t)).collect(), params: Q { lookup: Some(to), ..p.clone() }, table })
}

/// Island `at`'s value at every (level, column) of `levels`, the tensor it reads (`[…,
/// columns]`), as a `[columns, 256]` table, and its output type: where it is pointwise, writes
/// 8-bit levels of `levels`' shape and reads `levels` and per-column constants otherwise.
fn island_table(net: &Network, at: usize, levels: TensorId, backend: &dyn crate::backend::Backend) -> Option<(DataType, HostTensor)> {
    let shape = &net.tensor(levels).shape;
    let columns = shape.dims().last()?.fixed()?;
    let island = net.layer(LayerId(at));
    let LayerKind::Fused(f) = &island.kind else { return None };
    let pointwise = matches!(f.anchor, FusedAnchor::Activation(_) | FusedAnchor::Unary(_) | FusedAnchor::Elementwise(_));
    let by_rows = f.epilogue.iter().any(|s| matches!(s, PostOp::Normalization { .. }));
    let out = island.outputs.first().copied()?;
    let to = net.tensor(out).dtype;
    if !pointwise || by_rows || island.outputs.len() != 1 || !to.is_8bit_integer() || net.tensor(out).shape != *shape {
        return None;
    }
    let bytes = Q::LOOKUP_ROW;
    let probe = Arc::new(HostTensor::new(vec![bytes, columns], every_level(net.tensor(levels).dtype, columns)?).ok()?);
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
    Some((to, by_column(&looked, columns)?))
}

/// Every 8-bit level of `dtype` in `columns` columns, `[256, columns]` data: row b holds byte b
/// in every column (an island's probe; with one column, the table row that keeps each level).
fn every_level(dtype: DataType, columns: usize) -> Option<TensorData> {
    let n = Q::LOOKUP_ROW * columns;
    match dtype {
        DataType::I8 => Some(TensorData::I8((0..n).map(|j| (j / columns) as u8 as i8).collect())),
        DataType::U8 => Some(TensorData::U8((0..n).map(|j| (j / columns) as u8).collect())),
        _ => None,
    }
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
