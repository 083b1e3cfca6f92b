//! ONNX `TensorProto` → kiln `HostTensor`: element types, every typed storage field, raw
//! little-endian bytes and external data files.

use crate::error::ImportError;
use crate::proto::tensor_proto::{DataLocation, DataType as OnnxType};
use crate::proto::TensorProto;
use half::{bf16, f16};
use kiln::ir::narrow::unpack_bits;
use kiln::{DataType, HostTensor, TensorData};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// The kiln type of an ONNX element type code.
pub(crate) fn dtype_from_onnx(code: i32) -> Result<DataType, String> {
    let onnx = OnnxType::try_from(code).map_err(|_| format!("unknown ONNX element type code {code}"))?;
    Ok(match onnx {
        OnnxType::Float => DataType::F32,
        OnnxType::Float16 => DataType::F16,
        OnnxType::Bfloat16 => DataType::BF16,
        OnnxType::Double => DataType::F64,
        OnnxType::Int8 => DataType::I8,
        OnnxType::Int16 => DataType::I16,
        OnnxType::Int32 => DataType::I32,
        OnnxType::Int64 => DataType::I64,
        OnnxType::Uint8 => DataType::U8,
        OnnxType::Uint16 => DataType::U16,
        OnnxType::Uint32 => DataType::U32,
        OnnxType::Uint64 => DataType::U64,
        OnnxType::Bool => DataType::Bool,
        OnnxType::Float8e4m3fn => DataType::F8E4M3FN,
        OnnxType::Float8e4m3fnuz => DataType::F8E4M3FNUZ,
        OnnxType::Float8e5m2 => DataType::F8E5M2,
        OnnxType::Float8e5m2fnuz => DataType::F8E5M2FNUZ,
        OnnxType::Float8e8m0 => DataType::F8E8M0,
        OnnxType::Float4e2m1 => DataType::F4E2M1,
        OnnxType::Int4 => DataType::I4,
        OnnxType::Uint4 => DataType::U4,
        OnnxType::Int2 => DataType::I2,
        OnnxType::Uint2 => DataType::U2,
        OnnxType::String => DataType::String,
        other => return Err(format!("element type {} is not supported by kiln", other.as_str_name())),
    })
}

/// Converts a tensor proto. `owner` names the node (empty for initializers) in errors;
/// `model_dir` resolves external data.
pub(crate) fn host_tensor(t: &TensorProto, owner: &str, model_dir: Option<&Path>) -> Result<HostTensor, ImportError> {
    let name = t.name();
    let invalid = |reason: String| ImportError::InvalidModel {
        node: owner.to_string(),
        reason: format!("tensor `{name}`: {reason}"),
    };
    let dtype = dtype_from_onnx(t.data_type()).map_err(invalid)?;
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| invalid(format!("negative dim {d} in {:?}", t.dims))))
        .collect::<Result<Vec<usize>, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| invalid(format!("dims {:?} overflow the element count", t.dims)))?;
    if t.segment.is_some() {
        return Err(invalid("segmented tensors are not supported".into()));
    }
    let data = if dtype == DataType::String {
        // Strings live in `string_data` only (never raw or external bytes).
        let strings = t
            .string_data
            .iter()
            .map(|s| String::from_utf8(s.clone()).map_err(|_| invalid("a string element is not UTF-8".into())))
            .collect::<Result<Vec<_>, _>>()?;
        TensorData::String(strings)
    } else if t.data_location() == DataLocation::External {
        let expected = match dtype.packed_bits() {
            Some(bits) => Some(count.div_ceil((8 / bits) as usize)),
            None => dtype.size_bytes().and_then(|size| count.checked_mul(size)),
        }
        .ok_or_else(|| invalid(format!("dims {:?} overflow the byte count", t.dims)))?;
        read_external(t, model_dir, dtype, count, expected, &invalid)?
    } else if let Some(raw) = &t.raw_data {
        from_raw(dtype, raw, count).map_err(invalid)?
    } else {
        from_typed_fields(t, dtype, count).map_err(invalid)?
    };
    if data.len() != count {
        return Err(invalid(format!("holds {} {} values but dims {:?} need {count}", data.len(), dtype, t.dims)));
    }
    HostTensor::new(shape, data).map_err(|e| invalid(e.to_string()))
}

/// Little-endian element bytes (bool: one byte each, any nonzero byte is true; 4- and
/// 2-bit types: packed, first element in the low bits, `count` elements).
fn from_raw(dtype: DataType, bytes: &[u8], count: usize) -> Result<TensorData, String> {
    if dtype == DataType::Bool {
        return Ok(TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()));
    }
    if let Some(bits) = dtype.packed_bits() {
        return unpacked(dtype, bytes, bits, count);
    }
    TensorData::from_le_bytes(dtype, bytes).ok_or_else(|| {
        format!(
            "raw data of {} bytes is not a whole number of {}-byte {dtype} elements",
            bytes.len(),
            dtype.size_bytes().unwrap_or(0)
        )
    })
}

/// Narrows `int32_data` values, which ONNX uses for every type of 16 bits or fewer.
fn narrow<T: TryFrom<i32>>(values: &[i32], dtype: DataType) -> Result<Vec<T>, String> {
    values.iter().map(|&v| T::try_from(v).map_err(|_| format!("int32_data value {v} does not fit {dtype}"))).collect()
}

/// 16-bit float bit patterns stored in `int32_data`.
fn half_bits(values: &[i32], dtype: DataType) -> Result<Vec<u16>, String> {
    narrow::<u16>(values, dtype)
}

/// `count` elements of a 4- or 2-bit type packed in `bytes`, one per byte in kiln.
fn unpacked(dtype: DataType, bytes: &[u8], bits: u32, count: usize) -> Result<TensorData, String> {
    let per_byte = (8 / bits) as usize;
    if bytes.len() != count.div_ceil(per_byte) {
        return Err(format!(
            "{} bytes of packed {dtype} data cannot hold exactly {count} elements ({per_byte} per byte)",
            bytes.len()
        ));
    }
    let codes = unpack_bits(bytes, bits, count).expect("the byte count was checked");
    Ok(TensorData::from_le_bytes(dtype, &codes).expect("unpacked codes fit their width"))
}

fn from_typed_fields(t: &TensorProto, dtype: DataType, count: usize) -> Result<TensorData, String> {
    let ints = &t.int32_data;
    if dtype.packed_bits().is_some() || dtype.is_narrow_float() {
        // One byte per int32 value: an 8-bit float code, or packed 4/2-bit elements.
        let bytes: Vec<u8> = narrow(ints, dtype)?;
        return match dtype.packed_bits() {
            Some(bits) => unpacked(dtype, &bytes, bits, count),
            None => Ok(TensorData::from_le_bytes(dtype, &bytes).expect("one byte per element")),
        };
    }
    Ok(match dtype {
        DataType::F32 => TensorData::F32(t.float_data.clone()),
        DataType::F64 => TensorData::F64(t.double_data.clone()),
        DataType::I32 => TensorData::I32(ints.clone()),
        DataType::I16 => TensorData::I16(narrow(ints, dtype)?),
        DataType::I8 => TensorData::I8(narrow(ints, dtype)?),
        DataType::U16 => TensorData::U16(narrow(ints, dtype)?),
        DataType::U8 => TensorData::U8(narrow(ints, dtype)?),
        DataType::Bool => TensorData::Bool(ints.iter().map(|&v| v != 0).collect()),
        DataType::F16 => TensorData::F16(half_bits(ints, dtype)?.into_iter().map(f16::from_bits).collect()),
        DataType::BF16 => TensorData::BF16(half_bits(ints, dtype)?.into_iter().map(bf16::from_bits).collect()),
        DataType::I64 => TensorData::I64(t.int64_data.clone()),
        DataType::U64 => TensorData::U64(t.uint64_data.clone()),
        DataType::U32 => TensorData::U32(
            t.uint64_data
                .iter()
                .map(|&v| u32::try_from(v).map_err(|_| format!("uint64_data value {v} does not fit u32")))
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("no typed storage field holds {other}")),
    })
}

/// Reads `count` elements (`expected` bytes) of external data, refusing paths that leave the
/// model directory. Plain numeric types are read straight into their storage, so a large
/// weight is never held twice. `invalid` reports bytes that are not valid elements.
fn read_external(
    t: &TensorProto,
    model_dir: Option<&Path>,
    dtype: DataType,
    count: usize,
    expected: usize,
    invalid: &dyn Fn(String) -> ImportError,
) -> Result<TensorData, ImportError> {
    let error = |reason: String| ImportError::ExternalData { tensor: t.name().to_string(), reason };
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for entry in &t.external_data {
        let value = entry.value();
        let number = |what: &str| {
            value.parse::<u64>().map_err(|_| error(format!("{what} `{value}` is not a non-negative integer")))
        };
        match entry.key() {
            "location" => location = Some(value),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| error("no `location` entry".into()))?;
    let relative = safe_relative_path(location).map_err(error)?;
    let dir = model_dir
        .ok_or_else(|| error(format!("the data is in `{location}` but no model directory was given to resolve it")))?;
    let path = dir.join(relative);
    let mut file = File::open(&path).map_err(|e| error(format!("cannot open `{}`: {e}", path.display())))?;
    let file_len = file.metadata().map_err(|e| error(format!("cannot stat `{}`: {e}", path.display())))?.len();
    let available = file_len
        .checked_sub(offset)
        .ok_or_else(|| error(format!("offset {offset} is past the end of `{location}` ({file_len} bytes)")))?;
    let length = length.unwrap_or(available);
    if length > available {
        return Err(error(format!(
            "{length} bytes at offset {offset} run past the end of `{location}` ({file_len} bytes)"
        )));
    }
    if length != expected as u64 {
        return Err(error(format!("holds {length} bytes but the tensor needs {expected}")));
    }
    let read_error = |e: std::io::Error| error(format!("cannot read `{}`: {e}", path.display()));
    file.seek(SeekFrom::Start(offset)).map_err(read_error)?;
    let mut reader = file.take(length);
    if dtype == DataType::Bool || dtype.packed_bits().is_some() {
        // ONNX's byte conventions for these differ from kiln's element bytes.
        let mut bytes = vec![0u8; expected];
        reader.read_exact(&mut bytes).map_err(read_error)?;
        return from_raw(dtype, &bytes, count).map_err(invalid);
    }
    TensorData::read_le(dtype, count, &mut reader).map_err(read_error)
}

/// A relative path with no `..`, root or drive component.
fn safe_relative_path(location: &str) -> Result<PathBuf, String> {
    let path = Path::new(location);
    if location.is_empty() {
        return Err("the location is empty".into());
    }
    if path.is_absolute() || path.has_root() {
        return Err(format!("location `{location}` is absolute; it must be relative to the model directory"));
    }
    for component in path.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!("location `{location}` contains `..`; it must stay inside the model directory"))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("location `{location}` is absolute; it must be relative to the model directory"))
            }
        }
    }
    Ok(path.to_path_buf())
}

/// A 0-D tensor of `dtype` holding `value` (converted with Rust `as` semantics).
pub(crate) fn scalar(dtype: DataType, value: f64) -> HostTensor {
    filled(dtype, vec![], value)
}

/// A tensor of `dtype` and `shape` whose elements all equal `value`.
pub(crate) fn filled(dtype: DataType, shape: Vec<usize>, value: f64) -> HostTensor {
    let n: usize = shape.iter().product();
    let data = match dtype {
        DataType::F32 => TensorData::F32(vec![value as f32; n]),
        DataType::F16 => TensorData::F16(vec![kiln::f16_from_f64(value); n]),
        DataType::BF16 => TensorData::BF16(vec![kiln::bf16_from_f64(value); n]),
        DataType::F64 => TensorData::F64(vec![value; n]),
        DataType::I8 => TensorData::I8(vec![value as i8; n]),
        DataType::I16 => TensorData::I16(vec![value as i16; n]),
        DataType::I32 => TensorData::I32(vec![value as i32; n]),
        DataType::I64 => TensorData::I64(vec![value as i64; n]),
        DataType::U8 => TensorData::U8(vec![value as u8; n]),
        DataType::U16 => TensorData::U16(vec![value as u16; n]),
        DataType::U32 => TensorData::U32(vec![value as u32; n]),
        DataType::U64 => TensorData::U64(vec![value as u64; n]),
        DataType::Bool => TensorData::Bool(vec![value != 0.0; n]),
        // Numbers are not strings; a string fill is the number's text (callers fill numbers).
        DataType::String => TensorData::String(vec![value.to_string(); n]),
        narrow => TensorData::narrow_from_f64(narrow, &vec![value; n]).expect("the remaining types are narrow"),
    };
    HostTensor::new(shape, data).expect("element count matches the shape")
}

/// Values converted from f64 into a tensor of `dtype` (for host-side folding of float
/// parameters such as batch-norm coefficients).
pub(crate) fn from_f64(dtype: DataType, shape: Vec<usize>, values: &[f64]) -> Result<HostTensor, String> {
    let data = match dtype {
        DataType::F32 => TensorData::F32(values.iter().map(|&v| v as f32).collect()),
        DataType::F16 => TensorData::F16(values.iter().map(|&v| kiln::f16_from_f64(v)).collect()),
        DataType::BF16 => TensorData::BF16(values.iter().map(|&v| kiln::bf16_from_f64(v)).collect()),
        DataType::F64 => TensorData::F64(values.to_vec()),
        other => return Err(format!("expected a floating-point type, got {other}")),
    };
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}
