//! Horizontal fusion of sibling integer products: [`QuantizedParams`] matrix products of one
//! input's levels by constant 8-bit weights of the same depth become one product over the
//! weights side by side, whose columns are sliced back apart (as [`super::HorizontalMatMulFusion`]
//! does for float products). A Q/DQ transformer's query, key and value projections then run as
//! one integer GEMM three times as wide: one launch, fuller waves, the input read once.
//!
//! Exact: each column keeps its own arithmetic. The members' weight scales, int32 biases and
//! level tables go side by side; their output scales too (one per channel of the merged layer,
//! so each column's multiplier is `x_scale·w_scale[k] / y_scale[k]`, the f32 operations it had).
//! Members merge only where the rest is equal: the input's scale and zero point, the output's
//! type, zero point, ReLU and table type, and no float term, residual or second quantization
//! (those divide by one output scale).

use super::graph::{has_control_flow, known_value};
use super::horizontal::{rewrite_groups, slice_apart};
use super::{Pass, PassContext, PassError};
use crate::ir::layer::{LayerKind, MatrixOp};
use crate::ir::network::{Network, TensorId};
use crate::ir::quantized::{QuantizedAnchor, QuantizedParams as Q};
use crate::ir::tensor::{HostTensor, TensorData};
use crate::ir::dtype::DataType;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizedHorizontalFusion;

/// A product this pass can merge.
struct Member {
    layer: usize,
    /// Output channels (columns).
    columns: usize,
    /// Whether its weights are stored transposed (`[N, K]`).
    transposed: bool,
}

impl Pass for QuantizedHorizontalFusion {
    fn name(&self) -> &'static str {
        "quantized-horizontal-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        // KILN_QUANTIZED_HORIZONTAL=0 leaves the siblings apart (A/B measurements).
        let off = std::env::var("KILN_QUANTIZED_HORIZONTAL").is_ok_and(|v| v == "0");
        if off || has_control_flow(network) {
            return Ok(None);
        }
        let mut groups: HashMap<(TensorId, String), Vec<Member>> = HashMap::new();
        for i in 0..network.layers().len() {
            if let Some((x, key, m)) = member(network, i) {
                groups.entry((x, key)).or_default().push(m);
            }
        }
        let mut groups: Vec<Vec<Member>> = groups.into_values().filter(|g| g.len() >= 2).collect();
        if groups.is_empty() {
            return Ok(None);
        }
        groups.sort_by_key(|g| g[0].layer);
        let widths: Vec<String> =
            groups.iter().map(|g| g.iter().map(|m| m.columns.to_string()).collect::<Vec<_>>().join("+")).collect();
        tracing::info!(
            target: "kiln::builder",
            "horizontal fusion: {} groups of integer products reading one input's levels merged side by side ({} columns)",
            groups.len(),
            widths.join(", ")
        );
        let layers: Vec<Vec<usize>> = groups.iter().map(|g| g.iter().map(|m| m.layer).collect()).collect();
        rewrite_groups(network, &layers, |rb, g| merge(network, rb, &groups[g])).map(Some)
    }
}

/// The constant value in slot `s` of layer `l`'s inputs (None: the slot is empty; Err: it is
/// not constant).
fn slot_value<'a>(net: &'a Network, inputs: &[Option<TensorId>], s: usize) -> Result<Option<&'a HostTensor>, ()> {
    match inputs.get(s).copied().flatten() {
        None => Ok(None),
        Some(t) => known_value(net, t).map(Some).ok_or(()),
    }
}

/// Layer `i` as a mergeable integer product: its input, the key siblings must share, and its
/// columns.
fn member(net: &Network, i: usize) -> Option<(TensorId, String, Member)> {
    let l = &net.layers()[i];
    let LayerKind::Quantized(p) = &l.kind else { return None };
    let QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b } = p.anchor else { return None };
    let transposed = match op_b {
        MatrixOp::None => false,
        MatrixOp::Transpose => true,
        _ => return None,
    };
    if !p.quantized_output() || p.then.is_some() || net.outputs().contains(l.outputs.first()?) {
        return None;
    }
    let value = |s: usize| slot_value(net, &l.inputs, s).ok();
    // Float terms and skip connections divide by one output scale: not merged.
    if [Q::RESIDUAL, Q::JOIN, Q::THEN_SCALE].iter().any(|&s| l.inputs.get(s).copied().flatten().is_some()) {
        return None;
    }
    let w = value(Q::W)??;
    let [a, b] = w.shape()[..] else { return None };
    let (depth, columns) = if transposed { (b, a) } else { (a, b) };
    if !w.dtype().is_8bit_integer() {
        return None;
    }
    let one = |t: Option<&HostTensor>| t.map(|t| t.to_f64_vec()).filter(|v| v.len() == 1).map(|v| v[0]);
    let fits_columns = |t: &HostTensor| t.len() == 1 || t.len() == columns;
    let x_scale = one(value(Q::X_SCALE)?)?;
    let x_zero = match value(Q::X_ZERO)? {
        None => 0.0,
        z => one(z)?,
    };
    let y_zero = match value(Q::Y_ZERO)? {
        None => 0.0,
        z => one(z)?,
    };
    let y_scale = value(Q::Y_SCALE)??;
    let w_scale = value(Q::W_SCALE)??;
    let bias = value(Q::BIAS)?;
    if !fits_columns(y_scale) || !fits_columns(w_scale) || bias.is_some_and(|b| b.dtype() != DataType::I32 || !fits_columns(b)) {
        return None;
    }
    // Zero weight zero points only: the merged layer has none.
    if value(Q::W_ZERO)?.is_some_and(|z| z.to_f64_vec().iter().any(|&v| v != 0.0)) {
        return None;
    }
    let lookup = value(Q::LOOKUP)?;
    if p.lookup.is_some() != lookup.is_some() {
        return None;
    }
    // 2:4 sparse weights merge only with 2:4 siblings (a dense part would lose sparse kernels).
    let two_four = crate::sparsity::is_eligible(net, crate::ir::network::LayerId(i));
    let x = l.inputs[Q::X]?;
    let key = format!(
        "{:?} {:?} {} {} {} {} {} {} {} {two_four}",
        p.output,
        p.lookup,
        p.relu,
        w.dtype(),
        depth,
        transposed,
        x_scale.to_bits(),
        x_zero,
        y_zero
    );
    Some((x, key, Member { layer: i, columns, transposed }))
}

/// Member `m`'s constant in `slot` (None where the slot is empty; `member` admitted only
/// constants).
fn member_value<'a>(net: &'a Network, m: &Member, slot: usize) -> Option<&'a HostTensor> {
    slot_value(net, &net.layers()[m.layer].inputs, slot).ok().flatten()
}

/// `values` (one, or one per column) as one per each of `columns`.
fn per_column(values: &[f64], columns: usize) -> impl Iterator<Item = f64> + '_ {
    (0..columns).map(move |k| values[if values.len() == 1 { 0 } else { k }])
}

/// The members' values in `slot`, each widened to one f32 per column, side by side (`None`
/// where every member has the same one value: the first member's tensor is kept).
fn per_column_f32(net: &Network, group: &[Member], slot: usize) -> Result<Option<HostTensor>, PassError> {
    let values = group
        .iter()
        .map(|m| member_value(net, m, slot).map(HostTensor::to_f64_vec).ok_or_else(|| PassError::Internal(format!("slot {slot} of a merged product is not constant"))))
        .collect::<Result<Vec<_>, _>>()?;
    if values.iter().all(|v| v.len() == 1 && v[0].to_bits() == values[0][0].to_bits()) {
        return Ok(None);
    }
    let wide: Vec<f32> = group.iter().zip(&values).flat_map(|(m, v)| per_column(v, m.columns).map(|v| v as f32)).collect();
    let len = wide.len();
    HostTensor::from_f32(vec![len], wide).map(Some).map_err(|e| PassError::Internal(e.to_string()))
}

/// The members' `[N_i, width]` constants in `slot` one after another: `[ΣN, width]` (transposed
/// weights, level tables).
fn rows_one_after_another(net: &Network, group: &[Member], slot: usize) -> Result<HostTensor, PassError> {
    let parts = group.iter().map(|m| member_value(net, m, slot).ok_or_else(|| PassError::Internal(format!("slot {slot} of a merged product is not constant")))).collect::<Result<Vec<_>, _>>()?;
    let mut bytes = Vec::new();
    for p in &parts {
        bytes.extend_from_slice(p.data().as_le_bytes().ok_or_else(|| PassError::Internal(format!("slot {slot}'s bytes")))?);
    }
    let rows: usize = parts.iter().map(|p| p.shape()[0]).sum();
    let data = TensorData::from_le_bytes(parts[0].dtype(), &bytes).ok_or_else(|| PassError::Internal(format!("slot {slot}'s bytes")))?;
    HostTensor::new(vec![rows, parts[0].shape()[1]], data).map_err(|e| PassError::Internal(e.to_string()))
}

/// The members' weights side by side: `[K, ΣN]`, or `[ΣN, K]` stored transposed.
fn weights_side_by_side(net: &Network, group: &[Member]) -> Result<HostTensor, PassError> {
    if group[0].transposed {
        return rows_one_after_another(net, group, Q::W);
    }
    let parts = group.iter().map(|m| member_value(net, m, Q::W).ok_or_else(|| PassError::Internal("a member's weights are not constant".into()))).collect::<Result<Vec<_>, _>>()?;
    super::horizontal::side_by_side(&parts)
}

/// The members' int32 biases side by side (zeros for a member without one), `None` where none
/// has one.
fn biases_side_by_side(net: &Network, group: &[Member]) -> Result<Option<HostTensor>, PassError> {
    let biases: Vec<Option<&HostTensor>> = group.iter().map(|m| member_value(net, m, Q::BIAS)).collect();
    if biases.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut wide = Vec::new();
    for (m, b) in group.iter().zip(&biases) {
        let v = b.map_or_else(|| vec![0.0], |b| b.to_f64_vec());
        wide.extend(per_column(&v, m.columns).map(|v| v as i32));
    }
    let len = wide.len();
    HostTensor::new(vec![len], TensorData::I32(wide)).map(Some).map_err(|e| PassError::Internal(e.to_string()))
}

/// One integer product over the group's weights side by side, then a Slice per member carrying
/// its output.
fn merge(net: &Network, rb: &mut crate::ir::rewrite::Rewriter<'_>, group: &[Member]) -> Result<(), PassError> {
    let first = &net.layers()[group[0].layer];
    let name = group.iter().map(|m| net.layers()[m.layer].name.as_str()).collect::<Vec<_>>().join(" | ");
    let mut inputs = vec![None; Q::SLOTS];
    // Shared by every member (the key): the input, its scale and zero point, the output's zero point.
    for s in [Q::X, Q::X_SCALE, Q::X_ZERO, Q::Y_ZERO] {
        inputs[s] = first.inputs[s].map(|t| rb.get(t)).transpose()?;
    }
    inputs[Q::W] = Some(rb.constant(&format!("{name} weights"), weights_side_by_side(net, group)?)?);
    if let Some(b) = biases_side_by_side(net, group)? {
        inputs[Q::BIAS] = Some(rb.constant(&format!("{name} bias"), b)?);
    }
    for (slot, what) in [(Q::W_SCALE, "weight scales"), (Q::Y_SCALE, "output scales")] {
        inputs[slot] = Some(match per_column_f32(net, group, slot)? {
            Some(wide) => rb.constant(&format!("{name} {what}"), wide)?,
            None => rb.get(first.inputs[slot].ok_or_else(|| PassError::Internal(format!("no {what}")))?)?,
        });
    }
    if first.inputs[Q::LOOKUP].is_some() {
        inputs[Q::LOOKUP] = Some(rb.constant(&format!("{name} level tables"), rows_one_after_another(net, group, Q::LOOKUP)?)?);
    }
    let wide = rb.out_mut().add_layer(&name, first.kind.clone(), inputs)?;
    let wide = rb.out().output(wide, 0);
    let members: Vec<(usize, usize)> = group.iter().map(|m| (m.layer, m.columns)).collect();
    slice_apart(net, rb, wide, &members)
}
