//! numpy arrays to kiln host tensors and back. Inputs are read in logical (C) order whatever
//! their strides; outputs become new arrays. bf16, which numpy lacks, comes back as float32.

use half::{bf16, f16};
use kiln::{DataType, HostTensor, TensorData};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyReadonlyArrayDyn, PyReadwriteArrayDyn};
use pyo3::prelude::*;

/// The array as a host tensor of the same type, or an error naming the dtype.
pub fn to_tensor(name: &str, value: &Bound<'_, PyAny>) -> Result<HostTensor, String> {
    macro_rules! try_as {
        ($t:ty, $variant:ident) => {
            if let Ok(array) = value.extract::<PyReadonlyArrayDyn<'_, $t>>() {
                let view = array.as_array();
                let shape = view.shape().to_vec();
                let values: Vec<$t> = view.iter().copied().collect();
                return HostTensor::new(shape, TensorData::$variant(values)).map_err(|e| format!("input `{name}`: {e}"));
            }
        };
    }
    try_as!(f32, F32);
    try_as!(f64, F64);
    try_as!(f16, F16);
    try_as!(i64, I64);
    try_as!(i32, I32);
    try_as!(i16, I16);
    try_as!(i8, I8);
    try_as!(u8, U8);
    try_as!(u16, U16);
    try_as!(u32, U32);
    try_as!(u64, U64);
    try_as!(bool, Bool);
    let kind = match value.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        Err(_) if value.hasattr("dtype").unwrap_or(false) => {
            value.getattr("dtype").and_then(|d| d.str()).map(|s| format!("a numpy array of dtype {s}")).unwrap_or_default()
        }
        _ => value.get_type().name().map(|n| format!("a {n}")).unwrap_or_else(|_| "not an array".into()),
    };
    Err(format!("input `{name}` must be a numpy array of a number or bool type; got {kind}"))
}

/// A new numpy array holding the tensor (bf16 widened to float32).
pub fn to_array<'py>(py: Python<'py>, tensor: &HostTensor) -> Result<Bound<'py, PyAny>, String> {
    let shape = IxDyn(tensor.shape());
    macro_rules! array {
        ($values:expr) => {
            ArrayD::from_shape_vec(shape, $values).map(|a| a.into_pyarray(py).into_any()).map_err(|e| e.to_string())
        };
    }
    match tensor.data() {
        TensorData::F32(v) => array!(v.clone()),
        TensorData::F64(v) => array!(v.clone()),
        TensorData::F16(v) => array!(v.clone()),
        TensorData::BF16(v) => array!(v.iter().map(|x: &bf16| x.to_f32()).collect::<Vec<f32>>()),
        TensorData::I64(v) => array!(v.clone()),
        TensorData::I32(v) => array!(v.clone()),
        TensorData::I16(v) => array!(v.clone()),
        TensorData::I8(v) => array!(v.clone()),
        TensorData::U8(v) => array!(v.clone()),
        TensorData::U16(v) => array!(v.clone()),
        TensorData::U32(v) => array!(v.clone()),
        TensorData::U64(v) => array!(v.clone()),
        TensorData::Bool(v) => array!(v.clone()),
        _ => Err(format!("outputs of type {} have no numpy type", tensor.dtype())),
    }
}

/// The dtype name numpy uses for a kiln type (`bfloat16` where numpy has none).
pub fn numpy_dtype(dtype: DataType) -> String {
    match dtype {
        DataType::F32 => "float32",
        DataType::F64 => "float64",
        DataType::F16 => "float16",
        DataType::BF16 => "bfloat16",
        DataType::I8 => "int8",
        DataType::I16 => "int16",
        DataType::I32 => "int32",
        DataType::I64 => "int64",
        DataType::U8 => "uint8",
        DataType::U16 => "uint16",
        DataType::U32 => "uint32",
        DataType::U64 => "uint64",
        DataType::Bool => "bool",
        other => return other.to_string(),
    }
    .to_string()
}

/// Writes `tensor` into `array`, a writable numpy array of the tensor's dtype and element
/// count (bf16 into float32), in logical order whatever its strides.
pub fn write_into(name: &str, array: &Bound<'_, PyAny>, tensor: &HostTensor) -> Result<(), String> {
    macro_rules! write {
        ($t:ty, $values:expr) => {{
            let mut target = array
                .extract::<PyReadwriteArrayDyn<'_, $t>>()
                .map_err(|_| format!("output `{name}` is {} but its bound array is not a writable {} array", tensor.dtype(), numpy_dtype(tensor.dtype())))?;
            let mut view = target.as_array_mut();
            for (slot, value) in view.iter_mut().zip($values) {
                *slot = value;
            }
            Ok(())
        }};
    }
    match tensor.data() {
        TensorData::F32(v) => write!(f32, v.iter().copied()),
        TensorData::F64(v) => write!(f64, v.iter().copied()),
        TensorData::F16(v) => write!(f16, v.iter().copied()),
        TensorData::BF16(v) => write!(f32, v.iter().map(|x: &bf16| x.to_f32())),
        TensorData::I64(v) => write!(i64, v.iter().copied()),
        TensorData::I32(v) => write!(i32, v.iter().copied()),
        TensorData::I16(v) => write!(i16, v.iter().copied()),
        TensorData::I8(v) => write!(i8, v.iter().copied()),
        TensorData::U8(v) => write!(u8, v.iter().copied()),
        TensorData::U16(v) => write!(u16, v.iter().copied()),
        TensorData::U32(v) => write!(u32, v.iter().copied()),
        TensorData::U64(v) => write!(u64, v.iter().copied()),
        TensorData::Bool(v) => write!(bool, v.iter().copied()),
        _ => Err(format!("outputs of type {} have no numpy type", tensor.dtype())),
    }
}
