//! The engine inspector (seed §6.12): per-layer and whole-engine information as text or
//! JSON, with as much detail as the engine's recorded [`ProfilingVerbosity`] allows.
//!
//! Fields at DETAILED follow TensorRT's: `Name`, `LayerType`, `Inputs`/`Outputs` (each
//! `Name`, `Dimensions`, `Format/Datatype`), `ParameterType`, the layer's parameters
//! (convolutions spelled as TensorRT spells them, with `Weights`/`Bias` type and count; other
//! kinds under `Parameters`), `TacticName` and `TacticValue`: the chosen tactic's name (the
//! backend's kernel name where it has a single default tactic) and its id's hash. A layer
//! whose candidates the builder timed also lists them, with their times, as `TimedTactics`.
//!
//! Dynamic dims print as -1 and such tensors carry no `Format/Datatype`, unless input
//! shapes are set ([`EngineInspector::set_input_shapes`], standing in for TensorRT's
//! `setExecutionContext`), in which case shapes are inferred for those inputs. Boundary
//! tensors in vectorized formats show their logical dims, as TensorRT's do.

use crate::config::ProfilingVerbosity;
use crate::engine::Engine;
use crate::ir::dtype::DataType;
use crate::ir::format::TensorFormat;
use crate::ir::infer::{infer_layer, Fact};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::shape::{Dim, Shape};
use crate::ir::tensor::HostTensor;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::fmt::Write;
use thiserror::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerInformationFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InspectorError {
    #[error("layer index {index} is out of range: the engine has {count} layers")]
    LayerIndex { index: usize, count: usize },
    #[error("`{name}` is not an input of this engine (inputs: {inputs})")]
    UnknownInput { name: String, inputs: String },
    #[error("input `{name}`: shape {shape:?} does not fit {expected}")]
    InputShape { name: String, shape: Vec<usize>, expected: String },
}

/// Inspects one engine.
#[derive(Debug)]
pub struct EngineInspector<'e> {
    engine: &'e Engine,
    verbosity: ProfilingVerbosity,
    /// Per tensor, its shape for the set input shapes (`None`: the engine's own).
    resolved: Vec<Option<Vec<usize>>>,
}

impl<'e> EngineInspector<'e> {
    pub fn new(engine: &'e Engine) -> EngineInspector<'e> {
        let n = engine.network().tensors().len();
        EngineInspector { engine, verbosity: engine.build_flags().profiling_verbosity, resolved: vec![None; n] }
    }

    /// The detail shown: the engine's recorded verbosity, or less when lowered with
    /// [`EngineInspector::limit_verbosity`].
    pub fn verbosity(&self) -> ProfilingVerbosity {
        self.verbosity
    }

    /// Shows at most `verbosity`; an engine never shows more than it was built to.
    pub fn limit_verbosity(&mut self, verbosity: ProfilingVerbosity) {
        self.verbosity = self.verbosity.min(verbosity);
    }

    /// Fixes the shapes of dynamic inputs (by input name) so that dims show as numbers.
    /// Every dim that inference resolves from these shapes is shown; the rest stay -1.
    pub fn set_input_shapes(&mut self, shapes: &HashMap<String, Vec<usize>>) -> Result<(), InspectorError> {
        let net = self.engine.network();
        let names: Vec<&str> = net.inputs().iter().map(|&t| net.tensor(t).name.as_str()).collect();
        if let Some(unknown) = shapes.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(InspectorError::UnknownInput { name: unknown.clone(), inputs: names.join(", ") });
        }
        let mut known: Vec<Option<(DataType, Shape, Option<HostTensor>)>> = vec![None; net.tensors().len()];
        for &t in net.inputs() {
            let d = net.tensor(t);
            let Some(dims) = shapes.get(&d.name) else { continue };
            let fits = dims.len() == d.shape.rank() && d.shape.dims().iter().zip(dims).all(|(a, &b)| a.fixed().is_none_or(|f| f == b));
            if !fits {
                return Err(InspectorError::InputShape { name: d.name.clone(), shape: dims.clone(), expected: d.shape.text() });
            }
            known[t.0] = Some((d.dtype, Shape::fixed(dims), None));
        }
        for l in net.layers() {
            let facts: Vec<Option<Fact>> = l
                .inputs
                .iter()
                .map(|t| {
                    t.map(|t| match &known[t.0] {
                        Some((dtype, shape, value)) => Fact::new(*dtype, shape, value.as_ref()),
                        None => net.fact(t),
                    })
                })
                .collect();
            // A layer inference cannot resolve (e.g. inside a loop) keeps the engine's shapes.
            let Ok(out) = infer_layer(&l.kind, &facts, &|w| net.weights_blob(w)) else { continue };
            for (o, &t) in out.into_iter().zip(&l.outputs) {
                known[t.0] = Some((o.dtype, o.shape, o.value));
            }
        }
        self.resolved = known.into_iter().map(|k| k.and_then(|(_, s, _)| s.as_fixed())).collect();
        Ok(())
    }

    /// Shows the dims of the shapes set on `context` (TensorRT's `setExecutionContext`):
    /// dynamic dims the context's input shapes resolve appear as numbers.
    pub fn set_execution_context(&mut self, context: &crate::ExecutionContext) -> Result<(), InspectorError> {
        self.set_input_shapes(&context.input_shapes())
    }

    /// Information on layer `index` in `format`, at the inspector's verbosity.
    pub fn get_layer_information(&self, index: usize, format: LayerInformationFormat) -> Result<String, InspectorError> {
        let count = self.engine.network().layers().len();
        if index >= count {
            return Err(InspectorError::LayerIndex { index, count });
        }
        let value = self.layer_value(index);
        Ok(match format {
            LayerInformationFormat::Json => to_json(&value),
            LayerInformationFormat::Text => layer_text(&value),
        })
    }

    /// Information on the whole engine: `{"Layers": [...], "Bindings": [...]}` in JSON, one
    /// layer per line (or block, at DETAILED) in text. Empty at NONE.
    pub fn get_engine_information(&self, format: LayerInformationFormat) -> String {
        let net = self.engine.network();
        if self.verbosity == ProfilingVerbosity::None {
            return match format {
                LayerInformationFormat::Json => "{}".into(),
                LayerInformationFormat::Text => String::new(),
            };
        }
        let layers: Vec<Value> = (0..net.layers().len()).map(|i| self.layer_value(i)).collect();
        let bindings: Vec<&str> = net.inputs().iter().chain(net.outputs()).map(|&t| net.tensor(t).name.as_str()).collect();
        match format {
            LayerInformationFormat::Json => to_json(&json!({ "Layers": layers, "Bindings": bindings })),
            LayerInformationFormat::Text => {
                let mut s = String::new();
                for l in &layers {
                    s.push_str(&layer_text(l));
                    if self.verbosity == ProfilingVerbosity::Detailed {
                        s.push('\n');
                    }
                }
                let _ = writeln!(s, "Bindings: {}", bindings.join(", "));
                s
            }
        }
    }

    fn layer_value(&self, index: usize) -> Value {
        let net = self.engine.network();
        let l = &net.layers()[index];
        match self.verbosity {
            ProfilingVerbosity::None => json!({}),
            ProfilingVerbosity::LayerNamesOnly => json!(l.name),
            ProfilingVerbosity::Detailed => {
                let mut m = Map::new();
                m.insert("Name".into(), json!(l.name));
                m.insert("LayerType".into(), json!(l.kind.type_name()));
                m.insert("Inputs".into(), Value::Array(l.inputs.iter().flatten().map(|&t| self.tensor_value(t)).collect()));
                m.insert("Outputs".into(), Value::Array(l.outputs.iter().map(|&t| self.tensor_value(t)).collect()));
                m.insert("ParameterType".into(), json!(l.kind.type_name()));
                parameters(net, index, &mut m);
                if self.engine.math().sparse_weights && crate::sparsity::is_eligible(net, LayerId(index)) {
                    // 2:4 weights in a SPARSE_WEIGHTS engine; `Sparse`: whether it runs sparse.
                    let sparse = self.engine.tactics().get(index).and_then(Option::as_ref).is_some_and(crate::sparsity::is_sparse_tactic);
                    m.insert("AllowSparse".into(), json!(1));
                    m.insert("Sparse".into(), json!(sparse as u8));
                }
                m.insert("TacticName".into(), json!(self.engine.tactic_name(index)));
                m.insert("TacticValue".into(), json!(format!("0x{:016x}", self.engine.tactic_value(index))));
                let timed = self.engine.tactic_times(index);
                if !timed.is_empty() {
                    let timed: Vec<Value> =
                        timed.iter().map(|(t, ns)| json!({ "Tactic": t.to_string(), "TimeMs": *ns as f64 * 1e-6 })).collect();
                    m.insert("TimedTactics".into(), Value::Array(timed));
                }
                Value::Object(m)
            }
        }
    }

    fn tensor_value(&self, t: TensorId) -> Value {
        let net = self.engine.network();
        let d = net.tensor(t);
        let dims: Vec<i64> = match &self.resolved[t.0] {
            Some(fixed) => fixed.iter().map(|&n| n as i64).collect(),
            None => d.shape.dims().iter().map(|dim| dim.fixed().map_or(-1, |n| n as i64)).collect(),
        };
        let dims = logical_dims(net, t, dims);
        let mut m = Map::new();
        m.insert("Name".into(), json!(d.name));
        let dynamic = dims.contains(&-1);
        m.insert("Dimensions".into(), json!(dims));
        if !dynamic {
            m.insert("Format/Datatype".into(), json!(d.format.describe(d.dtype)));
        }
        Value::Object(m)
    }
}

/// A boundary tensor in a vectorized format is shown with its logical dims (the channel
/// count comes from the Reformat layer next to it).
fn logical_dims(net: &Network, t: TensorId, physical: Vec<i64>) -> Vec<i64> {
    let format = net.tensor(t).format;
    if format == TensorFormat::Linear {
        return physical;
    }
    let channels = net.layers().iter().find_map(|l| match l.kind {
        LayerKind::Reformat { channels, .. } if l.inputs.contains(&Some(t)) || l.outputs.contains(&t) => Some(channels),
        _ => None,
    });
    let Some(channels) = channels else { return physical };
    let shape = Shape(physical.iter().map(|&n| if n < 0 { Dim::Unknown } else { Dim::Fixed(n as usize) }).collect());
    match format.logical_shape(&shape, channels) {
        Ok(logical) => logical.dims().iter().map(|d| d.fixed().map_or(-1, |n| n as i64)).collect(),
        Err(_) => physical,
    }
}

/// TensorRT's parameter fields for convolutions; the kind's own fields otherwise.
fn parameters(net: &Network, index: usize, m: &mut Map<String, Value>) {
    let l = &net.layers()[index];
    let weights = |slot: usize| -> Value {
        let Some(t) = l.inputs.get(slot).copied().flatten() else {
            return json!({ "Type": "FP32", "Count": 0 });
        };
        let d = net.tensor(t);
        json!({ "Type": crate::ir::format::inspector_type_name(d.dtype), "Count": d.shape.volume().map_or(-1, |v| v as i64) })
    };
    let conv = |m: &mut Map<String, Value>, groups: usize, strides: &[usize], dilations: &[usize], pre: &[usize], post: &[usize]| {
        let w = l.inputs.get(1).copied().flatten().map(|t| net.tensor(t).shape.clone()).unwrap_or_default();
        let fixed = |d: &Dim| d.fixed().map_or(-1, |n| n as i64);
        let kernel: Vec<i64> = w.dims().iter().skip(2).map(fixed).collect();
        let out_maps = match l.kind {
            LayerKind::Deconvolution(_) => w.dims().get(1).map_or(-1, fixed) * groups as i64,
            _ => w.dims().first().map_or(-1, fixed),
        };
        let has_bias = l.inputs.get(2).copied().flatten().is_some();
        m.insert("Kernel".into(), json!(kernel));
        m.insert("PaddingMode".into(), json!("kEXPLICIT_ROUND_DOWN"));
        m.insert("PrePadding".into(), json!(pre));
        m.insert("PostPadding".into(), json!(post));
        m.insert("Stride".into(), json!(strides));
        m.insert("Dilation".into(), json!(dilations));
        m.insert("OutMaps".into(), json!(out_maps));
        m.insert("Groups".into(), json!(groups));
        m.insert("Weights".into(), weights(1));
        m.insert("Bias".into(), weights(2));
        m.insert("HasBias".into(), json!(has_bias as u8));
        m.insert("AllowSparse".into(), json!(0));
        m.insert("Activation".into(), json!("NONE"));
        m.insert("HasReLU".into(), json!(0));
    };
    match &l.kind {
        LayerKind::Convolution(p) => conv(m, p.groups, &p.strides, &p.dilations, &p.pre_padding, &p.post_padding),
        LayerKind::Deconvolution(p) => conv(m, p.groups, &p.strides, &p.dilations, &p.pre_padding, &p.post_padding),
        LayerKind::Constant { weights: id } => {
            let blob = net.weights_blob(*id);
            m.insert(
                "Weights".into(),
                json!({
                    "Type": blob.map_or("FP32", |b| crate::ir::format::inspector_type_name(b.dtype())),
                    "Count": blob.map_or(0, |b| b.len()),
                }),
            );
        }
        other => {
            let params = match serde_json::to_value(other) {
                // Externally tagged: {"Kind": params} or "Kind" for a kind without fields.
                Ok(Value::Object(o)) => o.into_iter().next().map_or(Value::Null, |(_, v)| v),
                _ => Value::Null,
            };
            m.insert("Parameters".into(), params);
            // A join is an input slot, not a field: say whether the skip connection is folded in.
            if matches!(other, LayerKind::Quantized(_)) {
                m.insert("JoinsSkipConnection".into(), json!(l.inputs.get(crate::QuantizedParams::JOIN).copied().flatten().is_some()));
            }
        }
    }
}

fn to_json(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
}

/// A layer as text: its name alone, or `Key: value` lines at DETAILED.
fn layer_text(v: &Value) -> String {
    match v {
        Value::String(name) => format!("{name}\n"),
        Value::Object(m) if m.is_empty() => String::new(),
        Value::Object(m) => {
            let mut s = String::new();
            for (k, v) in m {
                match v {
                    Value::Array(items) if k == "Inputs" || k == "Outputs" => {
                        let _ = writeln!(s, "{k}:");
                        for item in items {
                            let name = item.get("Name").and_then(Value::as_str).unwrap_or("");
                            let dims = item.get("Dimensions").map_or(String::new(), Value::to_string);
                            match item.get("Format/Datatype").and_then(Value::as_str) {
                                Some(f) => {
                                    let _ = writeln!(s, "  {name} {dims} {f}");
                                }
                                None => {
                                    let _ = writeln!(s, "  {name} {dims}");
                                }
                            }
                        }
                    }
                    Value::Array(items) if k == "TimedTactics" => {
                        let _ = writeln!(s, "{k}:");
                        for item in items {
                            let tactic = item.get("Tactic").and_then(Value::as_str).unwrap_or("");
                            let ms = item.get("TimeMs").and_then(Value::as_f64).unwrap_or(f64::NAN);
                            let _ = writeln!(s, "  {tactic} {ms:.4} ms");
                        }
                    }
                    Value::String(text) => {
                        let _ = writeln!(s, "{k}: {text}");
                    }
                    other => {
                        let _ = writeln!(s, "{k}: {other}");
                    }
                }
            }
            s
        }
        _ => String::new(),
    }
}
