//! Network-definition API for reduced precision (seed §6.5) and I/O formats (seed §6.6):
//! per-layer precision and output-type constraints, network output types, allowed formats
//! of network inputs and outputs, and strongly typed networks.

use super::dtype::DataType;
use super::format::FormatMask;
use super::network::{Layer, LayerId, Network, TensorId};
use crate::error::NetworkError;

impl Layer {
    /// The precision constraint; meaningless unless [`Layer::precision_is_set`].
    pub fn precision(&self) -> DataType {
        self.precision.unwrap_or(DataType::F32)
    }

    pub fn precision_is_set(&self) -> bool {
        self.precision.is_some()
    }

    /// The output type constraint of output `index`; meaningless unless
    /// [`Layer::output_type_is_set`].
    pub fn output_type(&self, index: usize) -> DataType {
        self.output_types.get(index).copied().flatten().unwrap_or(DataType::F32)
    }

    pub fn output_type_is_set(&self, index: usize) -> bool {
        self.output_types.get(index).copied().flatten().is_some()
    }
}

impl Network {
    /// A strongly typed network (TensorRT 10's `kSTRONGLY_TYPED` creation flag): every
    /// tensor's type follows the input types and explicit Cast layers; the builder keeps
    /// those types and refuses reduced-precision builder flags and layer constraints.
    pub fn new_strongly_typed(name: impl Into<String>) -> Network {
        let mut net = Network::new(name);
        net.strongly_typed = true;
        net
    }

    pub fn is_strongly_typed(&self) -> bool {
        self.strongly_typed
    }

    /// Asks that `layer` compute in `precision` (TensorRT's `ILayer::setPrecision`): its
    /// float inputs are converted to that type. The builder honours it as the precision
    /// flags say (see [`crate::BuilderFlag`]).
    pub fn set_layer_precision(&mut self, layer: LayerId, precision: DataType) -> Result<(), NetworkError> {
        self.constrainable(layer, precision)?;
        self.parts_mut().layers[layer.0].precision = Some(precision);
        Ok(())
    }

    pub fn reset_layer_precision(&mut self, layer: LayerId) -> Result<(), NetworkError> {
        self.check_layer(layer)?;
        self.parts_mut().layers[layer.0].precision = None;
        Ok(())
    }

    /// Asks that output `index` of `layer` have type `dtype` (TensorRT's
    /// `ILayer::setOutputType`); the builder inserts a Cast after the layer when its
    /// computation gives another type.
    pub fn set_layer_output_type(&mut self, layer: LayerId, index: usize, dtype: DataType) -> Result<(), NetworkError> {
        self.constrainable(layer, dtype)?;
        let l = &self.layers()[layer.0];
        if index >= l.outputs.len() {
            return Err(NetworkError::Layer {
                layer: l.name.clone(),
                tensor: String::new(),
                rule: format!("output type of output {index} set, but the layer has {} outputs", l.outputs.len()),
            });
        }
        let types = &mut self.parts_mut().layers[layer.0].output_types;
        if types.len() <= index {
            types.resize(index + 1, None);
        }
        types[index] = Some(dtype);
        Ok(())
    }

    pub fn reset_layer_output_type(&mut self, layer: LayerId, index: usize) -> Result<(), NetworkError> {
        self.check_layer(layer)?;
        if let Some(slot) = self.parts_mut().layers[layer.0].output_types.get_mut(index) {
            *slot = None;
        }
        Ok(())
    }

    /// The type the user receives for network output `tensor` (TensorRT's
    /// `ITensor::setType` on an output). When the producing layer gives another type, the
    /// builder inserts a Cast.
    pub fn set_network_output_type(&mut self, tensor: TensorId, dtype: DataType) -> Result<(), NetworkError> {
        if !self.outputs().contains(&tensor) {
            return Err(self.io_error(tensor, "only a network output's type can be set; mark it as an output first".into()));
        }
        if self.strongly_typed && self.tensor(tensor).dtype != dtype {
            return Err(self.io_error(tensor, "a strongly typed network's output types follow its layers; add a Cast layer instead".into()));
        }
        self.parts_mut().tensors[tensor.0].requested_type = Some(dtype);
        Ok(())
    }

    /// The formats a network input or output may take (TensorRT's
    /// `ITensor::setAllowedFormats`): a bitmask of [`crate::TensorFormat::bit`]s.
    pub fn set_allowed_formats(&mut self, tensor: TensorId, formats: FormatMask) -> Result<(), NetworkError> {
        if !self.inputs().contains(&tensor) && !self.outputs().contains(&tensor) {
            return Err(self.io_error(tensor, "allowed formats apply to network inputs and outputs only".into()));
        }
        if formats.unknown_bits() != 0 {
            return Err(self.io_error(tensor, format!("format mask {:#x} has bits that name no kiln format ({:#x})", formats.0, formats.unknown_bits())));
        }
        if formats.0 == 0 {
            return Err(self.io_error(tensor, "the format mask allows no format".into()));
        }
        self.parts_mut().tensors[tensor.0].allowed_formats = formats;
        Ok(())
    }

    pub fn allowed_formats(&self, tensor: TensorId) -> FormatMask {
        self.tensor(tensor).allowed_formats
    }

    fn constrainable(&self, layer: LayerId, dtype: DataType) -> Result<(), NetworkError> {
        self.check_layer(layer)?;
        if self.strongly_typed {
            return Err(NetworkError::Layer {
                layer: self.layers()[layer.0].name.clone(),
                tensor: String::new(),
                rule: format!("cannot constrain the layer to {dtype}: in a strongly typed network types follow the inputs and Cast layers"),
            });
        }
        Ok(())
    }

    fn check_layer(&self, layer: LayerId) -> Result<(), NetworkError> {
        if layer.0 < self.layers().len() {
            Ok(())
        } else {
            Err(NetworkError::Layer { layer: format!("#{}", layer.0), tensor: String::new(), rule: "no such layer in this network".into() })
        }
    }

    fn io_error(&self, tensor: TensorId, rule: String) -> NetworkError {
        let name = self.tensors().get(tensor.0).map_or_else(|| format!("#{}", tensor.0), |t| t.name.clone());
        NetworkError::Layer { layer: "(network I/O)".into(), tensor: name, rule }
    }
}
