//! What an op builder sees of one node: its resolved inputs, attributes and opset, plus
//! helpers that add kiln layers named after the node.

use crate::attributes::Attributes;
use crate::error::ImportError;
use crate::proto::NodeProto;
use crate::sequence::Sequence;
use crate::subgraph::Subgraphs;
use std::collections::HashMap;
use crate::tensor;
use kiln::{DataType, Dim, GatherMode, HostTensor, LayerKind, Network, NetworkError, ShuffleParams, TensorId};
use std::path::Path;

/// One node being imported.
pub(crate) struct NodeContext<'a> {
    pub net: &'a mut Network,
    pub node: &'a NodeProto,
    /// The node's name (`op_type` + index when the model leaves it empty).
    pub name: &'a str,
    /// The model's opset for the node's domain.
    pub opset: i64,
    /// The `since_version` of the operator definition in effect at `opset`.
    pub version: i64,
    pub attrs: Attributes<'a>,
    /// One slot per ONNX input; `None` where the model passes the empty name.
    pub inputs: Vec<Option<TensorId>>,
    /// Resolves external data of tensors in attributes.
    pub model_dir: Option<&'a Path>,
    /// Imports graph attributes (Loop and Scan bodies, If branches) into `net`.
    pub subgraphs: &'a mut dyn Subgraphs,
    /// The sequences of the graph being imported, by ONNX value name.
    pub sequences: &'a HashMap<String, Sequence>,
    /// Sequence outputs the node's builder made, by output index.
    pub made_sequences: Vec<(usize, Sequence)>,
    /// How many leading inputs the builder looked at: a present input after them is one
    /// the op does not take (a Relu given three inputs), an error rather than ignored.
    pub inputs_read: std::cell::Cell<usize>,
}

impl NodeContext<'_> {
    pub fn op_type(&self) -> &str {
        self.node.op_type()
    }

    // ---- errors ----

    pub fn invalid(&self, reason: impl Into<String>) -> ImportError {
        ImportError::InvalidModel { node: self.name.to_string(), reason: reason.into() }
    }

    pub fn unsupported(&self, feature: impl Into<String>) -> ImportError {
        ImportError::UnsupportedFeature {
            node: self.name.to_string(),
            op_type: self.op_type().to_string(),
            feature: feature.into(),
        }
    }

    pub fn network_error(&self, source: NetworkError) -> ImportError {
        ImportError::Network { node: self.name.to_string(), source }
    }

    // ---- inputs and outputs ----

    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<TensorId, ImportError> {
        self.opt_input(i).ok_or_else(|| self.invalid(format!("{} needs input #{i}", self.op_type())))
    }

    pub fn opt_input(&self, i: usize) -> Option<TensorId> {
        self.read_inputs(i + 1);
        self.inputs.get(i).copied().flatten()
    }

    /// Every present input, in order (variadic ops).
    pub fn present_inputs(&self) -> Vec<TensorId> {
        self.read_inputs(self.node.input.len());
        self.inputs.iter().flatten().copied().collect()
    }

    /// Notes that the builder looked at the first `count` inputs.
    pub fn read_inputs(&self, count: usize) {
        self.inputs_read.set(self.inputs_read.get().max(count));
    }

    /// The first present input the builder never looked at, with its index: one too many.
    pub fn unread_input(&self) -> Option<(usize, &str)> {
        let read = self.inputs_read.get();
        self.node.input.iter().enumerate().skip(read).find(|(_, name)| !name.is_empty()).map(|(i, n)| (i, n.as_str()))
    }

    /// Input `i`, which must be a sequence.
    pub fn sequence(&self, i: usize) -> Result<Sequence, ImportError> {
        self.read_inputs(i + 1);
        let name = self.node.input.get(i).map_or("", String::as_str);
        self.sequences
            .get(name)
            .cloned()
            .ok_or_else(|| self.invalid(format!("input #{i} (`{name}`) must be a sequence")))
    }

    /// Whether the model consumes output `i` (it lists a non-empty name for it).
    pub fn output_wanted(&self, i: usize) -> bool {
        self.node.output.get(i).is_some_and(|n| !n.is_empty())
    }

    /// Fails when the model asks for output `i`, which kiln cannot produce.
    pub fn refuse_output(&self, i: usize, what: &str) -> Result<(), ImportError> {
        if self.output_wanted(i) {
            return Err(self.unsupported(format!("the optional output #{i} ({what})")));
        }
        Ok(())
    }

    // ---- facts ----

    pub fn dtype(&self, t: TensorId) -> DataType {
        self.net.tensor(t).dtype
    }

    pub fn dims(&self, t: TensorId) -> Vec<Dim> {
        self.net.tensor(t).shape.dims().to_vec()
    }

    pub fn rank(&self, t: TensorId) -> usize {
        self.net.tensor(t).shape.rank()
    }

    pub fn fixed_dims(&self, t: TensorId) -> Option<Vec<usize>> {
        self.net.tensor(t).shape.as_fixed()
    }

    /// The value known at build time (constants and what folds from them).
    pub fn value(&self, t: TensorId) -> Option<HostTensor> {
        self.net.tensor(t).value.as_deref().cloned()
    }

    pub fn const_ints(&self, t: TensorId) -> Option<Vec<i64>> {
        self.net.tensor(t).value.as_deref().and_then(HostTensor::to_i64_vec)
    }

    /// Integer values of input `i` that kiln needs at build time.
    pub fn required_const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>, ImportError> {
        let t = self.input(i)?;
        self.const_ints(t)
            .ok_or_else(|| self.unsupported(format!("a {what} input computed at run time (it must be constant)")))
    }

    /// A possibly negative axis normalized against `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize, ImportError> {
        kiln::ir::shape::normalize_axis(axis, rank)
            .ok_or_else(|| self.invalid(format!("axis {axis} is out of range for rank {rank}")))
    }

    /// Normalized axes, each at most once.
    pub fn axes(&self, axes: &[i64], rank: usize) -> Result<Vec<usize>, ImportError> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let axis = self.axis(a, rank)?;
            if out.contains(&axis) {
                return Err(self.invalid(format!("axis {a} is listed twice in {axes:?}")));
            }
            out.push(axis);
        }
        Ok(out)
    }

    // ---- layers ----

    fn layer_name(&self, part: &str) -> String {
        if part.is_empty() {
            self.name.to_string()
        } else {
            format!("{}/{part}", self.name)
        }
    }

    /// Adds a layer named after the node (`node/part` for helpers) and returns its outputs.
    pub fn add_layer_outputs(
        &mut self,
        part: &str,
        kind: LayerKind,
        inputs: Vec<Option<TensorId>>,
    ) -> Result<Vec<TensorId>, ImportError> {
        let name = self.layer_name(part);
        let layer = self.net.add_layer(&name, kind, inputs).map_err(|e| self.network_error(e))?;
        Ok(self.net.layer(layer).outputs.clone())
    }

    /// Adds a single-output layer and returns that output.
    pub fn add(&mut self, part: &str, kind: LayerKind, inputs: &[TensorId]) -> Result<TensorId, ImportError> {
        self.add_opt(part, kind, inputs.iter().map(|&t| Some(t)).collect())
    }

    /// [`NodeContext::add`] with optional input slots.
    pub fn add_opt(
        &mut self,
        part: &str,
        kind: LayerKind,
        inputs: Vec<Option<TensorId>>,
    ) -> Result<TensorId, ImportError> {
        let outputs = self.add_layer_outputs(part, kind, inputs)?;
        outputs.first().copied().ok_or_else(|| self.invalid("the layer produced no output"))
    }

    pub fn constant(&mut self, part: &str, value: HostTensor) -> Result<TensorId, ImportError> {
        let weights = self.net.add_weights(value);
        self.add(part, LayerKind::Constant { weights }, &[])
    }

    /// A 1-D i64 constant.
    pub fn const_i64(&mut self, part: &str, values: &[i64]) -> Result<TensorId, ImportError> {
        let value = HostTensor::from_i64(vec![values.len()], values.to_vec()).expect("1-D length matches");
        self.constant(part, value)
    }

    /// A 0-D constant of `dtype`.
    pub fn scalar(&mut self, part: &str, dtype: DataType, value: f64) -> Result<TensorId, ImportError> {
        self.constant(part, tensor::scalar(dtype, value))
    }

    /// `t` converted to `dtype` (itself when it already has that type).
    pub fn cast(&mut self, part: &str, t: TensorId, dtype: DataType) -> Result<TensorId, ImportError> {
        if self.dtype(t) == dtype {
            return Ok(t);
        }
        self.add(part, LayerKind::Cast { to: dtype }, &[t])
    }

    pub fn shuffle(&mut self, part: &str, t: TensorId, params: ShuffleParams) -> Result<TensorId, ImportError> {
        self.add(part, LayerKind::Shuffle(params), &[t])
    }

    /// Reshape to static dims (`0` copies the input dim at the same index, `-1` is inferred).
    pub fn reshape(&mut self, part: &str, t: TensorId, dims: Vec<i64>) -> Result<TensorId, ImportError> {
        let params = ShuffleParams { reshape: Some(dims), zero_is_placeholder: true, ..Default::default() };
        self.shuffle(part, t, params)
    }

    /// `t` with a new size-1 axis at `axis` (a reshape that copies every dim and appends the
    /// 1, then a transpose that moves it into place, so dynamic dims stay as they are).
    pub fn unsqueeze_axis(&mut self, part: &str, t: TensorId, axis: usize) -> Result<TensorId, ImportError> {
        let rank = self.rank(t);
        let mut reshape = vec![0; rank];
        reshape.push(1);
        let perm: Vec<usize> = (0..axis).chain(std::iter::once(rank)).chain(axis..rank).collect();
        let identity = axis == rank;
        let params = ShuffleParams {
            reshape: Some(reshape),
            second_transpose: if identity { Vec::new() } else { perm },
            zero_is_placeholder: true,
            ..Default::default()
        };
        self.shuffle(part, t, params)
    }

    /// The shape of `t` as a 1-D i64 tensor: a constant when every dim is fixed.
    pub fn shape_of(&mut self, part: &str, t: TensorId) -> Result<TensorId, ImportError> {
        match self.fixed_dims(t) {
            Some(d) => self.const_i64(part, &d.iter().map(|&v| v as i64).collect::<Vec<_>>()),
            None => self.add(part, LayerKind::Shape, &[t]),
        }
    }

    /// The length of `t` along `axis` as a 1-element i64 tensor.
    pub fn dim_of(&mut self, part: &str, t: TensorId, axis: usize) -> Result<TensorId, ImportError> {
        let dims = self.dims(t);
        let Some(dim) = dims.get(axis) else {
            return Err(self.invalid(format!("{part}: axis {axis} of a rank-{} tensor", dims.len())));
        };
        if let Some(n) = dim.fixed() {
            return self.const_i64(part, &[n as i64]);
        }
        let shape = self.add(&format!("{part} shape"), LayerKind::Shape, &[t])?;
        let index = self.const_i64(&format!("{part} index"), &[axis as i64])?;
        self.add(part, LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, &[shape, index])
    }
}
