//! Reduced precision (seed §6.5): builder flags, and the builder pass that decides every
//! layer's compute type.
//!
//! A layer computes in the type of its float inputs (shape inference makes types follow
//! inputs). To run a layer in another type the pass converts its float inputs (a Cast
//! layer, or for constant weights a converted copy of the weights) and casts its outputs
//! back to the types the rest of the network was validated with, so only that layer
//! changes. A cast back that the next layer would undo is skipped (f16 → f32 → f16 is exact).
//! Constants and Clip bounds moved into f16 or bf16 convert as TensorRT converts weights
//! (`precision/narrowing.rs`): nothing nonzero becomes zero and nothing finite becomes infinite, with a
//! warning naming what changed.
//!
//! Choice per layer, with the types the flags enable (f32 always; f16 with [`BuilderFlag::Fp16`],
//! bf16 with [`BuilderFlag::Bf16`]) and the backend's [`PrecisionSupport`]:
//! - unconstrained: the fastest enabled type the backend offers, else the layer's own type;
//! - with a precision or output-type constraint and OBEY_PRECISION_CONSTRAINTS: the
//!   constraint, or a build error naming the layer when it is not enabled or not offered;
//! - with PREFER_PRECISION_CONSTRAINTS: the constraint, or a warning and the fastest type;
//! - with neither: the constraint only where the backend says it is faster, else a warning
//!   and the fastest type (TensorRT's default).
//!
//! Strongly typed networks skip the pass: their types are the ones the network states, and
//! reduced-precision flags and constraints are refused. INT8 is a step before this pass
//! ([`crate::quant::implicit`]: Q/DQ layers); FP8 is not implemented. Unconstrained float
//! layers between Q/DQ pairs keep their type (`precision/islands.rs`).

use crate::backend::{Backend, PrecisionSupport};
use crate::config::{BuilderFlag, BuilderFlags};
use crate::error::NetworkError;
use crate::ir::dtype::DataType;
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::rewrite::Rewriter;
use std::collections::HashMap;
use thiserror::Error;

mod islands;
mod narrowing;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PrecisionError {
    /// OBEY_PRECISION_CONSTRAINTS and a constraint that cannot be met.
    #[error("layer `{layer}`: {what} {requested} cannot be obeyed: {reason}")]
    Unsatisfiable { layer: String, what: String, requested: DataType, reason: String },
    #[error("PREFER_PRECISION_CONSTRAINTS and OBEY_PRECISION_CONSTRAINTS are both set; choose one")]
    ConflictingFlags,
    /// A strongly typed network with a reduced-precision flag or constraint.
    #[error("network `{network}` is strongly typed: {what} is not allowed (types follow the inputs and Cast layers)")]
    StronglyTyped { network: String, what: String },
    #[error(transparent)]
    Network(#[from] NetworkError),
}

/// Whether a layer kind computes on float data whose type it may change: every kind but
/// those that define types (Constant, Cast, Shape, Fill, quantization, NonZero, OneHot),
/// boundary and control-flow layers, and plugins.
pub fn is_float_compute(kind: &LayerKind) -> bool {
    use LayerKind as K;
    !matches!(
        kind,
        K::Constant { .. }
            | K::Cast { .. }
            | K::CastNarrow { .. }
            | K::Shape
            | K::Fill { .. }
            | K::Quantize { .. }
            | K::Dequantize { .. }
            | K::Quantized(_)
            | K::NonZero
            | K::BitCast { .. }
            | K::NonMaxSuppression { .. }
            | K::Unique { .. }
            | K::OneHot { .. }
            | K::Assertion { .. }
            | K::Plugin(_)
            | K::Reformat { .. }
    ) && !kind.is_control_boundary()
}

fn is_reducible_float(dtype: DataType) -> bool {
    matches!(dtype, DataType::F32 | DataType::F16 | DataType::BF16)
}

/// The input slots whose type follows the layer's precision: every float slot, except
/// Resize's coordinates and scales and GridSample's grid.
fn converted_slot(kind: &LayerKind, slot: usize) -> bool {
    !matches!(kind, LayerKind::Resize(_) | LayerKind::GridSample(_)) || slot == 0
}

/// What the pass decided, for the build log and the inspector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrecisionReport {
    /// Unmet PREFER constraints and ignored hints.
    pub warnings: Vec<String>,
    /// Layers whose compute type changed: (layer name, type).
    pub changed: Vec<(String, DataType)>,
}

/// Checks a strongly typed network against the flags; decides and applies every layer's
/// compute type and the network output types.
pub fn apply(network: &Network, flags: BuilderFlags, backend: &dyn Backend) -> Result<(Network, PrecisionReport), PrecisionError> {
    let prefer = flags.contains(BuilderFlag::PreferPrecisionConstraints);
    let obey = flags.contains(BuilderFlag::ObeyPrecisionConstraints);
    if prefer && obey {
        return Err(PrecisionError::ConflictingFlags);
    }
    if network.is_strongly_typed() {
        check_strongly_typed(network, flags)?;
        return Ok((network.clone(), PrecisionReport::default()));
    }
    if !needs_rewrite(network, flags, backend) {
        return Ok((network.clone(), PrecisionReport::default()));
    }
    let mode = if obey {
        Mode::Obey
    } else if prefer {
        Mode::Prefer
    } else {
        Mode::Hint
    };
    let mut pass = Pass { rw: Rewriter::new(network), casts: HashMap::new(), report: PrecisionReport::default() };
    let quantized_islands = islands::quantized_island_layers(network);
    for (i, layer) in network.layers().iter().enumerate() {
        let id = LayerId(i);
        let support = backend.precision_support(network, id);
        let current = compute_type(network, id);
        let choice = Choice { flags, mode, support: &support, current, layer: &layer.name };
        let precision = match layer.precision {
            Some(requested) => choice.resolve("precision", requested, &mut pass.report)?,
            // Between Q/DQ the integers decide: the layer keeps its type.
            None if quantized_islands.contains(&i) => current,
            None => current.map(|c| choice.fastest(c)),
        };
        if let Some(p) = precision.filter(|&p| Some(p) != current) {
            pass.report.changed.push((layer.name.clone(), p));
        }
        // Every input arrives in the type the layer now reads: its precision for converted
        // float slots, else the type the network was validated with.
        let mut substitutes = HashMap::new();
        for (slot, t) in layer.inputs.iter().enumerate() {
            let Some(t) = t else { continue };
            let Some(mapped) = pass.rw.mapped(*t) else { continue };
            // Shape reads dims only: it takes a cast's source as it is (BERT's per-layer Shape
            // of the hidden state would otherwise keep a cast of it to f32 alive every layer).
            if matches!(layer.kind, LayerKind::Shape) {
                let out = pass.rw.out();
                let producer = out.tensor(mapped).producer.map(|(l, _)| out.layer(l));
                if let Some(source) = producer.filter(|l| matches!(l.kind, LayerKind::Cast { .. })).and_then(|l| l.inputs[0]) {
                    substitutes.insert(slot, source);
                }
                continue;
            }
            let validated = network.tensor(*t).dtype;
            let target = match precision {
                Some(p) if is_reducible_float(validated) && converted_slot(&layer.kind, slot) => p,
                _ => validated,
            };
            if pass.rw.out().tensor(mapped).dtype != target {
                substitutes.insert(slot, pass.cast(mapped, target)?);
            }
        }
        let copied = LayerId(pass.rw.out().layers().len());
        let outputs = pass.rw.copy_layer(id, &substitutes)?;
        if let Some((p, guarded)) = precision.and_then(|p| Some((p, narrowing::guarded_clip(&layer.kind, p)?))) {
            pass.report.warnings.push(format!(
                "layer `{}` in {p}: a Clip bound below {p}'s smallest subnormal is kept as that subnormal, not flushed to zero",
                layer.name
            ));
            pass.rw.out_mut().parts_mut().layers[copied.0].kind = guarded;
        }
        for (slot, (&src_t, &out_t)) in layer.outputs.iter().zip(&outputs).enumerate() {
            let original = network.tensor(src_t).dtype;
            let want = match layer.output_types.get(slot).copied().flatten() {
                Some(requested) => choice.output_type(requested, pass.rw.out().tensor(out_t).dtype, &mut pass.report)?,
                None => original,
            };
            let produced = pass.rw.out().tensor(out_t).dtype;
            let seen = if want == produced { out_t } else { pass.cast_renaming(out_t, want)? };
            pass.rw.set_mapped(src_t, seen);
        }
    }
    // A network output has the type the user asked for, else the one it was validated
    // with (TensorRT: "mandatory, defaults to FP32"), whatever its layer now produces.
    let mut outputs = Vec::with_capacity(network.outputs().len());
    for &o in network.outputs() {
        let t = pass.rw.mapped(o).expect("outputs are produced");
        let desc = network.tensor(o);
        let want = desc.requested_type.unwrap_or(desc.dtype);
        let produced = pass.rw.out().tensor(t).dtype;
        outputs.push(if want == produced { t } else { pass.cast_renaming(t, want)? });
    }
    let Pass { rw, report, .. } = pass;
    Ok((rw.finish(outputs)?, report))
}

/// Whether any layer could change type: a constraint, an output type to honour, or a
/// backend that runs some layer faster in an enabled type.
fn needs_rewrite(network: &Network, flags: BuilderFlags, backend: &dyn Backend) -> bool {
    let constrained = network.layers().iter().any(|l| l.precision_is_set() || l.output_types.iter().any(Option::is_some));
    let output_types = network.outputs().iter().any(|&o| {
        let d = network.tensor(o);
        d.requested_type.is_some_and(|t| t != d.dtype)
    });
    constrained
        || output_types
        || (0..network.layers().len()).any(|i| {
            compute_type(network, LayerId(i)).is_some()
                && backend.precision_support(network, LayerId(i)).faster.iter().any(|&t| flags.enables(t))
        })
}

fn check_strongly_typed(network: &Network, flags: BuilderFlags) -> Result<(), PrecisionError> {
    let refuse = |what: String| Err(PrecisionError::StronglyTyped { network: network.name.clone(), what });
    for flag in [BuilderFlag::Fp16, BuilderFlag::Bf16, BuilderFlag::PreferPrecisionConstraints, BuilderFlag::ObeyPrecisionConstraints] {
        if flags.contains(flag) {
            return refuse(format!("builder flag {}", flag.name()));
        }
    }
    for l in network.layers() {
        if l.precision_is_set() || l.output_types.iter().any(Option::is_some) {
            return refuse(format!("the precision constraint on layer `{}`", l.name));
        }
    }
    for &o in network.outputs() {
        let d = network.tensor(o);
        if d.requested_type.is_some_and(|t| t != d.dtype) {
            return refuse(format!("output type {} on `{}`, which its layer gives as {}", d.requested_type.unwrap_or(d.dtype), d.name, d.dtype));
        }
    }
    Ok(())
}

/// How many of the network's layers compute in each float type (layers whose precision
/// cannot change are not counted), in type order.
pub fn compute_type_counts(network: &Network) -> Vec<(DataType, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..network.layers().len() {
        if let Some(t) = compute_type(network, LayerId(i)) {
            *counts.entry(t).or_insert(0) += 1;
        }
    }
    counts.into_iter().collect()
}

/// The type a layer computes in now: that of its converted float inputs, when they are all
/// f32, f16 or bf16 and agree; `None` when the layer's precision cannot change.
fn compute_type(network: &Network, layer: LayerId) -> Option<DataType> {
    let l = network.layer(layer);
    if !is_float_compute(&l.kind) {
        return None;
    }
    let mut floats = l
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(slot, t)| t.map(|t| (slot, network.tensor(t).dtype)))
        .filter(|&(slot, d)| d.is_float() && converted_slot(&l.kind, slot))
        .map(|(_, d)| d);
    let first = floats.next()?;
    (is_reducible_float(first) && floats.all(|d| d == first)).then_some(first)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Obey,
    Prefer,
    /// Neither flag: constraints are hints followed only where faster.
    Hint,
}

struct Choice<'a> {
    flags: BuilderFlags,
    mode: Mode,
    support: &'a PrecisionSupport,
    current: Option<DataType>,
    layer: &'a str,
}

impl Choice<'_> {
    /// The fastest enabled type the backend offers, else `current`.
    fn fastest(&self, current: DataType) -> DataType {
        self.support
            .faster
            .iter()
            .copied()
            .find(|&t| self.flags.enables(t) && self.support.offered.contains(&t) && is_reducible_float(t))
            .unwrap_or(current)
    }

    /// Why `requested` cannot be the layer's compute type, if it cannot.
    fn unmet(&self, requested: DataType) -> Option<String> {
        let Some(current) = self.current else {
            return Some("the layer has no float computation whose type could change".into());
        };
        if requested == current {
            return None;
        }
        if !is_reducible_float(requested) {
            return Some(format!("layers compute in f32, f16 or bf16, not {requested}"));
        }
        if !self.flags.enables(requested) {
            let flag = if requested == DataType::F16 { BuilderFlag::Fp16 } else { BuilderFlag::Bf16 };
            return Some(format!("the {} builder flag is not set", flag.name()));
        }
        if !self.support.offered.contains(&requested) {
            let offered: Vec<&str> = self.support.offered.iter().map(|t| t.name()).collect();
            return Some(format!("the backend offers {} for this layer", offered.join(", ")));
        }
        None
    }

    fn resolve(&self, what: &str, requested: DataType, report: &mut PrecisionReport) -> Result<Option<DataType>, PrecisionError> {
        let fallback = self.current.map(|c| self.fastest(c));
        match (self.unmet(requested), self.mode) {
            (None, Mode::Obey | Mode::Prefer) => Ok(Some(requested)),
            (None, Mode::Hint) if self.support.faster.contains(&requested) || Some(requested) == fallback => Ok(Some(requested)),
            (None, Mode::Hint) => {
                report.warnings.push(format!(
                    "layer `{}`: {what} {requested} is not faster on this backend; using {} (set PREFER_PRECISION_CONSTRAINTS or OBEY_PRECISION_CONSTRAINTS to enforce it)",
                    self.layer,
                    fallback.map_or("its own types".to_string(), |t| t.to_string())
                ));
                Ok(fallback)
            }
            (Some(reason), Mode::Obey) => Err(PrecisionError::Unsatisfiable {
                layer: self.layer.to_string(),
                what: what.to_string(),
                requested,
                reason,
            }),
            (Some(reason), Mode::Prefer | Mode::Hint) => {
                report.warnings.push(format!(
                    "layer `{}`: {what} {requested} is not available ({reason}); using {}",
                    self.layer,
                    fallback.map_or("its own types".to_string(), |t| t.to_string())
                ));
                Ok(fallback)
            }
        }
    }

    /// The type output `requested` resolves to, given the type the layer now produces.
    fn output_type(&self, requested: DataType, produced: DataType, report: &mut PrecisionReport) -> Result<DataType, PrecisionError> {
        if requested == produced {
            return Ok(produced);
        }
        let unmet = (!self.flags.enables(requested)).then(|| {
            let flag = if requested == DataType::F16 { BuilderFlag::Fp16 } else { BuilderFlag::Bf16 };
            format!("the {} builder flag is not set", flag.name())
        });
        match (unmet, self.mode) {
            (None, Mode::Obey | Mode::Prefer) => Ok(requested),
            (None, Mode::Hint) => {
                report.warnings.push(format!(
                    "layer `{}`: output type {requested} is not faster on this backend; the output stays {produced} (set PREFER_PRECISION_CONSTRAINTS or OBEY_PRECISION_CONSTRAINTS to enforce it)",
                    self.layer
                ));
                Ok(produced)
            }
            (Some(reason), Mode::Obey) => Err(PrecisionError::Unsatisfiable {
                layer: self.layer.to_string(),
                what: "output type".into(),
                requested,
                reason,
            }),
            (Some(reason), Mode::Prefer | Mode::Hint) => {
                report.warnings.push(format!("layer `{}`: output type {requested} is not available ({reason}); the output stays {produced}", self.layer));
                Ok(produced)
            }
        }
    }
}

struct Pass<'s> {
    rw: Rewriter<'s>,
    /// (tensor of the new network, type) → its converted copy.
    casts: HashMap<(TensorId, DataType), TensorId>,
    report: PrecisionReport,
}

impl Pass<'_> {
    /// `t` converted to `to`: the tensor a cast came from when the round trip is exact,
    /// converted weights for a constant, else a new Cast layer. Memoized.
    fn cast(&mut self, t: TensorId, to: DataType) -> Result<TensorId, PrecisionError> {
        if let Some(&c) = self.casts.get(&(t, to)) {
            return Ok(c);
        }
        let out = self.rw.out();
        let desc = out.tensor(t);
        let producer = desc.producer.map(|(l, _)| out.layer(l));
        let converted = match producer.map(|l| (&l.kind, l)) {
            Some((LayerKind::Cast { .. }, l)) => l.inputs[0].filter(|&s| out.tensor(s).dtype == to && widens_exactly(to, desc.dtype)),
            _ => None,
        };
        let result = match (converted, producer.map(|l| &l.kind)) {
            (Some(source), _) => source,
            (None, Some(LayerKind::Constant { weights })) => {
                let blob = out.weights_blob(*weights).expect("constants refer to weights");
                let w = narrowing::narrow_weights(blob, to).expect("float weights convert between float types");
                self.report.warnings.extend(w.warning(&format!("constant `{}`", desc.name), to));
                let layer_name = format!("{} ({to})", producer.map_or("", |l| l.name.as_str()));
                let tensor_name = format!("{} ({to})", desc.name);
                self.rw.add_constant(&layer_name, w.tensor, &tensor_name)?
            }
            _ => {
                let name = desc.name.clone();
                self.rw.add_layer(&format!("cast `{name}` to {to}"), LayerKind::Cast { to }, vec![Some(t)], &[format!("{name} ({to})")])?[0]
            }
        };
        self.casts.insert((t, to), result);
        Ok(result)
    }

    /// Casts `t` to `to` with the cast's output taking over `t`'s name (consumers and the
    /// user see the name they gave); `t` is renamed after its type.
    fn cast_renaming(&mut self, t: TensorId, to: DataType) -> Result<TensorId, PrecisionError> {
        let desc = self.rw.out().tensor(t).clone();
        self.rw.rename(t, &format!("{} ({})", desc.name, desc.dtype))?;
        let c = self.rw.add_layer(&format!("cast `{}` to {to}", desc.name), LayerKind::Cast { to }, vec![Some(t)], std::slice::from_ref(&desc.name))?[0];
        let d = self.rw.tensor_mut(c);
        d.format = desc.format;
        d.allowed_formats = desc.allowed_formats;
        d.requested_type = desc.requested_type;
        self.casts.insert((t, to), c);
        Ok(c)
    }
}

/// Whether every value of `narrow` survives a trip through `wide` unchanged.
fn widens_exactly(narrow: DataType, wide: DataType) -> bool {
    use DataType as D;
    matches!((narrow, wide), (D::F16 | D::BF16, D::F32 | D::F64) | (D::F32, D::F64))
}
