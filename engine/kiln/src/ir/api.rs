//! The network-definition API, modelled on TensorRT's `INetworkDefinition`.
//!
//! Each `add_*` validates at once and returns the new layer's id; `Network::output(id, 0)`
//! is its output tensor. Weights passed here live on the host and are copied into the
//! network (as Constant layers feeding the layer's weight inputs).

use super::dtype::DataType;
use super::layer::*;
use super::network::{LayerId, Network, TensorId};
use super::tensor::{HostTensor, TensorData};
use crate::error::NetworkError;

impl Network {
    fn weights_error(layer: &str, rule: String) -> NetworkError {
        NetworkError::Layer { layer: layer.to_string(), tensor: String::new(), rule }
    }

    /// Adds a custom layer (TensorRT's addPluginV3) running `plugin`; its key and fields
    /// are stored in engines, so loading one recreates the instance from the registry.
    pub fn add_plugin_v3(&mut self, inputs: &[TensorId], plugin: std::sync::Arc<dyn super::plugin::LayerPlugin>) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Plugin(PluginParams::new(plugin)), inputs.iter().map(|&t| Some(t)).collect())
    }

    /// Adds a Constant layer holding `data` with shape `dims`.
    pub fn add_constant(&mut self, dims: &[usize], data: TensorData) -> Result<LayerId, NetworkError> {
        let weights = HostTensor::new(dims.to_vec(), data)
            .map_err(|e| Self::weights_error("(Constant)", e.to_string()))?;
        let id = self.add_weights(weights);
        self.add_layer("", LayerKind::Constant { weights: id }, vec![])
    }

    fn constant_named(&mut self, name: &str, dims: &[usize], data: TensorData) -> Result<TensorId, NetworkError> {
        let weights = HostTensor::new(dims.to_vec(), data).map_err(|e| Self::weights_error(name, e.to_string()))?;
        let id = self.add_weights(weights);
        let layer = self.add_layer(name, LayerKind::Constant { weights: id }, vec![])?;
        Ok(self.output(layer, 0))
    }

    fn next_name(&self, kind: &str) -> String {
        format!("({kind}) [{}]", self.layers().len())
    }

    fn channels(&self, input: TensorId, layer: &str) -> Result<usize, NetworkError> {
        self.tensor(input).shape.dims().get(1).and_then(|d| d.fixed()).ok_or_else(|| NetworkError::Layer {
            layer: layer.to_string(),
            tensor: self.tensor(input).name.clone(),
            rule: "the channel dim (axis 1) must be fixed to size the weights".into(),
        })
    }

    /// A convolution with `num_outputs` maps and host weights laid out
    /// `(num_outputs, C, *kernel_size)`; stride 1, no padding, one group.
    /// Change those with [`Network::set_convolution_params`] before using the output.
    pub fn add_convolution(
        &mut self,
        input: TensorId,
        num_outputs: usize,
        kernel_size: &[usize],
        kernel: TensorData,
        bias: Option<TensorData>,
    ) -> Result<LayerId, NetworkError> {
        let name = self.next_name("Convolution");
        let c = self.channels(input, &name)?;
        let mut dims = vec![num_outputs, c];
        dims.extend_from_slice(kernel_size);
        let w = self.constant_named(&format!("{name} kernel"), &dims, kernel)?;
        let b = bias.map(|b| self.constant_named(&format!("{name} bias"), &[num_outputs], b)).transpose()?;
        let n = kernel_size.len();
        let params = ConvolutionParams {
            groups: 1,
            strides: vec![1; n],
            dilations: vec![1; n],
            pre_padding: vec![0; n],
            post_padding: vec![0; n],
        };
        self.add_layer(&name, LayerKind::Convolution(params), vec![Some(input), Some(w), b])
    }

    /// Replaces a convolution's parameters (stride, padding, dilation, groups); only while
    /// its output is not yet consumed.
    pub fn set_convolution_params(&mut self, layer: LayerId, params: ConvolutionParams) -> Result<(), NetworkError> {
        self.replace_kind(layer, LayerKind::Convolution(params))
    }

    /// Max or average pooling with stride 1 and no padding; see [`Network::set_pooling_params`].
    pub fn add_pooling(&mut self, input: TensorId, kind: PoolingKind, window: &[usize]) -> Result<LayerId, NetworkError> {
        let n = window.len();
        let params = PoolingParams {
            kind,
            window: window.to_vec(),
            strides: vec![1; n],
            dilations: vec![1; n],
            pre_padding: vec![0; n],
            post_padding: vec![0; n],
            ceil_mode: false,
            average_count_excludes_padding: true,
        };
        self.add_layer("", LayerKind::Pooling(params), vec![Some(input)])
    }

    pub fn set_pooling_params(&mut self, layer: LayerId, params: PoolingParams) -> Result<(), NetworkError> {
        self.replace_kind(layer, LayerKind::Pooling(params))
    }

    /// A shuffle (transpose, reshape, transpose); start from `ShuffleParams::default()`.
    pub fn add_shuffle(&mut self, input: TensorId, params: ShuffleParams) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Shuffle(params), vec![Some(input)])
    }

    /// A shuffle that reshapes to `dims` (0 copies the input dim, -1 is inferred).
    pub fn add_reshape(&mut self, input: TensorId, dims: &[i64]) -> Result<LayerId, NetworkError> {
        let params = ShuffleParams { reshape: Some(dims.to_vec()), zero_is_placeholder: true, ..Default::default() };
        self.add_shuffle(input, params)
    }

    pub fn add_matrix_multiply(
        &mut self,
        a: TensorId,
        op_a: MatrixOp,
        b: TensorId,
        op_b: MatrixOp,
    ) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::MatrixMultiply { op_a, op_b }, vec![Some(a), Some(b)])
    }

    pub fn add_elementwise(&mut self, a: TensorId, b: TensorId, op: ElementwiseOp) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Elementwise { op }, vec![Some(a), Some(b)])
    }

    pub fn add_activation(&mut self, input: TensorId, kind: ActivationKind) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Activation { kind }, vec![Some(input)])
    }

    pub fn add_unary(&mut self, input: TensorId, op: UnaryOp) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Unary { op }, vec![Some(input)])
    }

    /// Softmax over the last axis; [`Network::add_softmax_axis`] picks another.
    pub fn add_softmax(&mut self, input: TensorId) -> Result<LayerId, NetworkError> {
        let axis = self.tensor(input).shape.rank().saturating_sub(1);
        self.add_softmax_axis(input, axis)
    }

    pub fn add_softmax_axis(&mut self, input: TensorId, axis: usize) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::SoftMax { axis }, vec![Some(input)])
    }

    /// TensorRT's fully connected layer: flattens every dim after the first, multiplies by
    /// the `(num_outputs, K)` host kernel transposed and adds the bias; output `(N, num_outputs)`.
    /// Built from Shuffle, MatrixMultiply and ElementWise layers named after this one.
    pub fn add_fully_connected(
        &mut self,
        input: TensorId,
        num_outputs: usize,
        kernel: TensorData,
        bias: Option<TensorData>,
    ) -> Result<LayerId, NetworkError> {
        let name = self.next_name("FullyConnected");
        // The batch (first) dim may be dynamic; the others size the kernel.
        let shape = &self.tensor(input).shape;
        let k = shape.dims().iter().skip(1).try_fold(1usize, |acc, d| d.fixed().and_then(|d| acc.checked_mul(d)));
        let k = k.filter(|_| shape.rank() >= 1).ok_or_else(|| NetworkError::Layer {
            layer: name.clone(),
            tensor: self.tensor(input).name.clone(),
            rule: "fully connected needs fixed dims after the first to size its kernel".into(),
        })?;
        let flat = self.add_layer(
            &format!("{name} flatten"),
            LayerKind::Shuffle(ShuffleParams { reshape: Some(vec![0, -1]), zero_is_placeholder: true, ..Default::default() }),
            vec![Some(input)],
        )?;
        let w = self.constant_named(&format!("{name} kernel"), &[num_outputs, k], kernel)?;
        let flat = self.output(flat, 0);
        let mm = self.add_layer(
            &format!("{name} matmul"),
            LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose },
            vec![Some(flat), Some(w)],
        )?;
        let Some(bias) = bias else { return Ok(mm) };
        let b = self.constant_named(&format!("{name} bias"), &[1, num_outputs], bias)?;
        let mm = self.output(mm, 0);
        self.add_layer(&name, LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(mm), Some(b)])
    }

    pub fn add_concatenation(&mut self, inputs: &[TensorId], axis: usize) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Concatenation { axis }, inputs.iter().map(|&t| Some(t)).collect())
    }

    /// A slice with static bounds (ONNX semantics: negative values count from the end).
    pub fn add_slice(
        &mut self,
        input: TensorId,
        starts: &[i64],
        ends: &[i64],
        axes: &[i64],
        steps: &[i64],
    ) -> Result<LayerId, NetworkError> {
        let name = self.next_name("Slice");
        let mut slots = vec![Some(input)];
        for (what, v) in [("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)] {
            slots.push(Some(self.constant_named(&format!("{name} {what}"), &[v.len()], TensorData::I64(v.to_vec()))?));
        }
        self.add_layer(&name, LayerKind::Slice, slots)
    }

    pub fn add_gather(&mut self, data: TensorId, indices: TensorId, mode: GatherMode) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Gather { mode }, vec![Some(data), Some(indices)])
    }

    pub fn add_select(&mut self, condition: TensorId, a: TensorId, b: TensorId) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Select, vec![Some(condition), Some(a), Some(b)])
    }

    pub fn add_shape(&mut self, input: TensorId) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Shape, vec![Some(input)])
    }

    pub fn add_reduce(
        &mut self,
        input: TensorId,
        op: ReduceOp,
        axes: &[usize],
        keep_dims: bool,
    ) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Reduce { op, axes: axes.to_vec(), keep_dims }, vec![Some(input)])
    }

    pub fn add_cast(&mut self, input: TensorId, to: DataType) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Cast { to }, vec![Some(input)])
    }

    pub fn add_identity(&mut self, input: TensorId) -> Result<LayerId, NetworkError> {
        self.add_layer("", LayerKind::Identity, vec![Some(input)])
    }

    /// Normalization over `axes` (layer norm: the trailing axes; instance norm: the spatial
    /// axes; group norm: `num_groups > 1`).
    pub fn add_normalization(
        &mut self,
        input: TensorId,
        scale: TensorId,
        bias: TensorId,
        axes: &[usize],
        epsilon: f32,
        num_groups: usize,
    ) -> Result<LayerId, NetworkError> {
        let kind = LayerKind::Normalization { axes: axes.to_vec(), epsilon, num_groups };
        self.add_layer("", kind, vec![Some(input), Some(scale), Some(bias)])
    }

    /// Replaces the kind of a layer whose outputs nothing consumes yet (parameter setters).
    fn replace_kind(&mut self, layer: LayerId, kind: LayerKind) -> Result<(), NetworkError> {
        let old = self.layer(layer).clone();
        if std::mem::discriminant(&old.kind) != std::mem::discriminant(&kind) {
            return Err(NetworkError::Layer {
                layer: old.name,
                tensor: String::new(),
                rule: format!("is a {} layer, not {}", old.kind.type_name(), kind.type_name()),
            });
        }
        let consumed = self.layers().iter().any(|l| l.inputs.iter().flatten().any(|t| old.outputs.contains(t)))
            || old.outputs.iter().any(|t| self.outputs().contains(t));
        if consumed {
            return Err(NetworkError::Layer {
                layer: old.name,
                tensor: String::new(),
                rule: "parameters can change only before the layer's output is used".into(),
            });
        }
        self.reinfer_layer(layer, kind)
    }
}
