//! Loop values on the device: an Iterator's slice of a tensor, and the stacked
//! CONCATENATE / REVERSE outputs of a loop.

use crate::exec::Run;
use crate::ops::layout::{copy, gather_view, Copy};
use crate::ops::{half, pointwise, strides, KResult};
use crate::value::{DeviceTensor, Value};
use kiln::ir::infer::{Fact, OutFact};
use kiln::runtime::layer_profile::LayerProfiler;
use kiln::runtime::machine::Machine;
use kiln::{invalid, DataType, HostTensor, KernelError, LayerId, Network};
use std::sync::Arc;

fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

impl Run<'_> {
    /// The slice of `value` at `index` along `axis`, the axis removed.
    pub fn slice_value(&self, value: &Value, axis: usize, index: usize) -> KResult<Value> {
        // The copy kernels move words: f16 halves take the widen/narrow path (see run_layer).
        let t = half::widen(&self.rec, &self.to_device(value)?)?;
        if axis >= t.shape.len() || index >= t.shape[axis] {
            return Err(invalid!("slice {index} along axis {axis} of a {:?} tensor", t.shape));
        }
        let st = strides(&t.shape);
        let mut shape = t.shape.clone();
        shape.remove(axis);
        let mut src = signed(&st);
        src.remove(axis);
        let out = gather_view(&self.rec, &t, &shape, (index * st[axis]) as i64, &src)?;
        Ok(Value::Device(half::to_halves(&self.rec, out)?))
    }

    /// `parts` stacked along a new axis `axis` of `length` (zeros past the parts), the last
    /// part first when `reverse`.
    pub fn stack_values(
        &self,
        parts: &[Value],
        axis: usize,
        length: usize,
        reverse: bool,
        dtype: DataType,
        slice_shape: &[usize],
    ) -> KResult<Value> {
        if parts.len() > length || axis > slice_shape.len() {
            return Err(invalid!("{} parts stacked along axis {axis} of length {length}", parts.len()));
        }
        let mut shape = slice_shape.to_vec();
        shape.insert(axis, length);
        let out: DeviceTensor = pointwise::fill(&self.rec, dtype, &shape, 0)?;
        let dst = signed(&strides(&shape));
        let mut dst_strides = dst.clone();
        dst_strides.remove(axis);
        let src_strides = signed(&strides(slice_shape));
        for (i, part) in parts.iter().enumerate() {
            let t = half::widen(&self.rec, &self.to_device(part)?)?;
            if t.shape != slice_shape {
                return Err(invalid!("loop output part {i} is {:?}, the others {slice_shape:?}", t.shape));
            }
            let at = if reverse { parts.len() - 1 - i } else { i };
            let c = Copy {
                shape: slice_shape,
                src_off: 0,
                src_strides: &src_strides,
                dst_off: at as i64 * dst[axis],
                dst_strides: &dst_strides,
            };
            copy(&self.rec, &t, &out, &c)?;
        }
        Ok(Value::Device(self.stored(vec![out])?.remove(0)))
    }
}

impl Machine for Run<'_> {
    type Value = Value;

    fn network(&self) -> &Network {
        &self.exe.network
    }

    fn backend_name(&self) -> &str {
        crate::NAME
    }

    fn meta(&self, value: &Value) -> (DataType, Vec<usize>) {
        (value.dtype(), value.shape().to_vec())
    }

    fn host_copy(&self, value: &Value) -> Option<Arc<HostTensor>> {
        match value {
            Value::Host(t) => Some(t.clone()),
            Value::Device(_) => None,
        }
    }

    fn host_value(&self, tensor: Arc<HostTensor>) -> Value {
        Value::Host(tensor)
    }

    fn to_host(&self, value: &Value) -> Result<Arc<HostTensor>, KernelError> {
        Run::to_host(self, value)
    }

    fn from_host(&self, tensor: Arc<HostTensor>) -> Result<Value, KernelError> {
        Ok(Value::Device(self.rec.upload(&tensor)?))
    }

    fn constant(&self, id: LayerId, weights: &Arc<HostTensor>) -> Result<Value, KernelError> {
        Run::constant(self, id, weights)
    }

    fn profiler(&self) -> Option<&dyn LayerProfiler> {
        self.clock.is_some().then_some(self as &dyn LayerProfiler)
    }

    fn run_kernel(
        &self,
        id: LayerId,
        inputs: &[Option<Value>],
        facts: &[Option<Fact>],
        expected: &[OutFact],
    ) -> Result<Vec<Value>, KernelError> {
        Run::run_kernel(self, id, inputs, facts, expected)
    }

    fn slice_along(&self, value: &Value, axis: usize, index: usize) -> Result<Value, KernelError> {
        self.slice_value(value, axis, index)
    }

    fn stack_along(
        &self,
        parts: &[Value],
        axis: usize,
        length: usize,
        reverse: bool,
        dtype: DataType,
        slice_shape: &[usize],
    ) -> Result<Value, KernelError> {
        self.stack_values(parts, axis, length, reverse, dtype, slice_shape)
    }
}
