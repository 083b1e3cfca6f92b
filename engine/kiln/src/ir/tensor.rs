//! Host tensors: dense, row-major, typed element storage.

use super::dtype::DataType;
use super::narrow::{E8M0Rounding, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4};
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Typed element storage of a host tensor. The storage-only types (float8, e8m0, float4,
/// 4- and 2-bit integers) hold one element per byte.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    F8E4M3FN(Vec<F8E4M3FN>),
    F8E4M3FNUZ(Vec<F8E4M3FNUZ>),
    F8E5M2(Vec<F8E5M2>),
    F8E5M2FNUZ(Vec<F8E5M2FNUZ>),
    F8E8M0(Vec<F8E8M0>),
    F4E2M1(Vec<F4E2M1>),
    I4(Vec<I4>),
    U4(Vec<U4>),
    I2(Vec<I2>),
    U2(Vec<U2>),
    /// UTF-8 strings.
    String(Vec<String>),
}

/// Applies `$body` to the typed vector inside a [`TensorData`], binding it as `$v`.
/// Every arm is monomorphic, so `$body` may use the element type generically. The
/// one-body form runs `$body` on strings too (it must compile for `Vec<String>`); the form
/// with `string $s => $other` runs `$other` for string data instead, for bodies that need
/// fixed-size (`Copy`, numeric) elements.
#[macro_export]
macro_rules! dispatch_data {
    ($data:expr, $v:ident => $body:expr) => {
        $crate::dispatch_data!($data, $v => $body, string $v => $body)
    };
    ($data:expr, $v:ident => $body:expr, string $s:ident => $other:expr) => {
        match $data {
            $crate::TensorData::String($s) => $other,
            $crate::TensorData::F32($v) => $body,
            $crate::TensorData::F16($v) => $body,
            $crate::TensorData::BF16($v) => $body,
            $crate::TensorData::F64($v) => $body,
            $crate::TensorData::I8($v) => $body,
            $crate::TensorData::I16($v) => $body,
            $crate::TensorData::I32($v) => $body,
            $crate::TensorData::I64($v) => $body,
            $crate::TensorData::U8($v) => $body,
            $crate::TensorData::U16($v) => $body,
            $crate::TensorData::U32($v) => $body,
            $crate::TensorData::U64($v) => $body,
            $crate::TensorData::Bool($v) => $body,
            $crate::TensorData::F8E4M3FN($v) => $body,
            $crate::TensorData::F8E4M3FNUZ($v) => $body,
            $crate::TensorData::F8E5M2($v) => $body,
            $crate::TensorData::F8E5M2FNUZ($v) => $body,
            $crate::TensorData::F8E8M0($v) => $body,
            $crate::TensorData::F4E2M1($v) => $body,
            $crate::TensorData::I4($v) => $body,
            $crate::TensorData::U4($v) => $body,
            $crate::TensorData::I2($v) => $body,
            $crate::TensorData::U2($v) => $body,
        }
    };
}

impl TensorData {
    /// The elements of `parts` one after the other; `None` when their types differ.
    pub fn concat(parts: &[&TensorData]) -> Option<TensorData> {
        let first = parts.first()?;
        macro_rules! join {
            ($($variant:ident),*) => {
                match first {
                    $(TensorData::$variant(_) => {
                        let mut out = Vec::new();
                        for part in parts {
                            let TensorData::$variant(v) = part else { return None };
                            out.extend(v.iter().cloned());
                        }
                        TensorData::$variant(out)
                    })*
                }
            };
        }
        Some(join!(
            F32, F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ,
            F8E8M0, F4E2M1, I4, U4, I2, U2, String
        ))
    }

    /// The elements at `indices`, in that order, of the same type (indices in range).
    pub fn gather(&self, indices: &[usize]) -> TensorData {
        macro_rules! pick {
            ($($variant:ident),*) => {
                match self {
                    $(TensorData::$variant(v) => TensorData::$variant(indices.iter().map(|&i| v[i].clone()).collect()),)*
                }
            };
        }
        pick!(
            F32, F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ,
            F8E8M0, F4E2M1, I4, U4, I2, U2, String
        )
    }

    pub fn dtype(&self) -> DataType {
        match self {
            TensorData::F32(_) => DataType::F32,
            TensorData::F16(_) => DataType::F16,
            TensorData::BF16(_) => DataType::BF16,
            TensorData::F64(_) => DataType::F64,
            TensorData::I8(_) => DataType::I8,
            TensorData::I16(_) => DataType::I16,
            TensorData::I32(_) => DataType::I32,
            TensorData::I64(_) => DataType::I64,
            TensorData::U8(_) => DataType::U8,
            TensorData::U16(_) => DataType::U16,
            TensorData::U32(_) => DataType::U32,
            TensorData::U64(_) => DataType::U64,
            TensorData::Bool(_) => DataType::Bool,
            TensorData::F8E4M3FN(_) => DataType::F8E4M3FN,
            TensorData::F8E4M3FNUZ(_) => DataType::F8E4M3FNUZ,
            TensorData::F8E5M2(_) => DataType::F8E5M2,
            TensorData::F8E5M2FNUZ(_) => DataType::F8E5M2FNUZ,
            TensorData::F8E8M0(_) => DataType::F8E8M0,
            TensorData::F4E2M1(_) => DataType::F4E2M1,
            TensorData::I4(_) => DataType::I4,
            TensorData::U4(_) => DataType::U4,
            TensorData::I2(_) => DataType::I2,
            TensorData::U2(_) => DataType::U2,
            TensorData::String(_) => DataType::String,
        }
    }

    pub fn len(&self) -> usize {
        dispatch_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` zero-valued elements of `dtype` (empty strings for [`DataType::String`]).
    pub fn zeros(dtype: DataType, len: usize) -> TensorData {
        match dtype {
            DataType::F32 => TensorData::F32(vec![0.0; len]),
            DataType::F16 => TensorData::F16(vec![f16::ZERO; len]),
            DataType::BF16 => TensorData::BF16(vec![bf16::ZERO; len]),
            DataType::F64 => TensorData::F64(vec![0.0; len]),
            DataType::I8 => TensorData::I8(vec![0; len]),
            DataType::I16 => TensorData::I16(vec![0; len]),
            DataType::I32 => TensorData::I32(vec![0; len]),
            DataType::I64 => TensorData::I64(vec![0; len]),
            DataType::U8 => TensorData::U8(vec![0; len]),
            DataType::U16 => TensorData::U16(vec![0; len]),
            DataType::U32 => TensorData::U32(vec![0; len]),
            DataType::U64 => TensorData::U64(vec![0; len]),
            DataType::Bool => TensorData::Bool(vec![false; len]),
            DataType::F8E4M3FN => TensorData::F8E4M3FN(vec![F8E4M3FN::default(); len]),
            DataType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(vec![F8E4M3FNUZ::default(); len]),
            DataType::F8E5M2 => TensorData::F8E5M2(vec![F8E5M2::default(); len]),
            DataType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(vec![F8E5M2FNUZ::default(); len]),
            DataType::F8E8M0 => TensorData::F8E8M0(vec![F8E8M0::default(); len]),
            DataType::F4E2M1 => TensorData::F4E2M1(vec![F4E2M1::default(); len]),
            DataType::I4 => TensorData::I4(vec![I4::default(); len]),
            DataType::U4 => TensorData::U4(vec![U4::default(); len]),
            DataType::I2 => TensorData::I2(vec![I2::default(); len]),
            DataType::U2 => TensorData::U2(vec![U2::default(); len]),
            DataType::String => TensorData::String(vec![String::new(); len]),
        }
    }

    /// Values converted to a storage-only type with Cast's defaults (floats: nearest even,
    /// saturating, e8m0 rounding up; 4/2-bit integers: truncated, low bits kept, non-finite
    /// to 0); `None` when `dtype` is not a storage-only type.
    pub fn narrow_from_f64(dtype: DataType, values: &[f64]) -> Option<TensorData> {
        let ints = || values.iter().map(|&v| if v.is_finite() { v.trunc() as i128 } else { 0 });
        let f = values.iter().copied();
        Some(match dtype {
            DataType::F8E4M3FN => TensorData::F8E4M3FN(f.map(|v| F8E4M3FN::from_f64(v, true)).collect()),
            DataType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(f.map(|v| F8E4M3FNUZ::from_f64(v, true)).collect()),
            DataType::F8E5M2 => TensorData::F8E5M2(f.map(|v| F8E5M2::from_f64(v, true)).collect()),
            DataType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(f.map(|v| F8E5M2FNUZ::from_f64(v, true)).collect()),
            DataType::F8E8M0 => TensorData::F8E8M0(f.map(|v| F8E8M0::from_f64(v, true, E8M0Rounding::Up)).collect()),
            DataType::F4E2M1 => TensorData::F4E2M1(f.map(|v| F4E2M1::from_f64(v, true)).collect()),
            DataType::I4 => TensorData::I4(ints().map(I4::wrapping).collect()),
            DataType::U4 => TensorData::U4(ints().map(U4::wrapping).collect()),
            DataType::I2 => TensorData::I2(ints().map(I2::wrapping).collect()),
            DataType::U2 => TensorData::U2(ints().map(U2::wrapping).collect()),
            _ => return None,
        })
    }

    /// Little-endian bytes of the elements (bool as 0/1 bytes; the storage-only types one
    /// byte each: float codes as they are, 4- and 2-bit integers as their low bits; strings
    /// as a little-endian u32 byte length followed by the UTF-8 bytes, each).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        if let Some(bytes) = self.as_le_bytes() {
            return bytes.to_vec();
        }
        match self {
            TensorData::String(v) => {
                let mut out = Vec::with_capacity(v.iter().map(|s| 4 + s.len()).sum());
                for s in v {
                    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                out
            }
            TensorData::F8E4M3FN(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E4M3FNUZ(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E5M2(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E5M2FNUZ(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F8E8M0(v) => v.iter().map(|x| x.0).collect(),
            TensorData::F4E2M1(v) => v.iter().map(|x| x.0 & 0x0F).collect(),
            TensorData::I4(v) => v.iter().map(|x| x.to_bits()).collect(),
            TensorData::U4(v) => v.iter().map(|x| x.to_bits()).collect(),
            TensorData::I2(v) => v.iter().map(|x| x.to_bits()).collect(),
            TensorData::U2(v) => v.iter().map(|x| x.to_bits()).collect(),
            TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I8(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::U8(v) => v.clone(),
            TensorData::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The elements' memory as [`TensorData::to_le_bytes`] would write it, without a copy:
    /// the numeric types whose memory already is that layout (all of them on a little-endian
    /// host). Host↔device transfers of large tensors copy straight from and to it.
    pub fn as_le_bytes(&self) -> Option<&[u8]> {
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match self {
            TensorData::F32(v) => bytemuck::cast_slice(v),
            TensorData::F16(v) => bytemuck::cast_slice(v),
            TensorData::BF16(v) => bytemuck::cast_slice(v),
            TensorData::F64(v) => bytemuck::cast_slice(v),
            TensorData::I8(v) => bytemuck::cast_slice(v),
            TensorData::I16(v) => bytemuck::cast_slice(v),
            TensorData::I32(v) => bytemuck::cast_slice(v),
            TensorData::I64(v) => bytemuck::cast_slice(v),
            TensorData::U8(v) => v,
            TensorData::U16(v) => bytemuck::cast_slice(v),
            TensorData::U32(v) => bytemuck::cast_slice(v),
            TensorData::U64(v) => bytemuck::cast_slice(v),
            _ => return None,
        })
    }

    /// Overwrites the elements with little-endian `bytes` in place (no allocation); `false`
    /// where the byte count differs or the type's memory is not that layout (then nothing
    /// changed).
    pub fn overwrite_le_bytes(&mut self, bytes: &[u8]) -> bool {
        if self.as_le_bytes().map(<[u8]>::len) != Some(bytes.len()) {
            return false;
        }
        let Some(dst) = self.le_memory_mut() else { return false };
        dst.copy_from_slice(bytes);
        true
    }

    /// [`TensorData::to_le_bytes`], borrowed where the memory already is that layout.
    pub fn le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.as_le_bytes() {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => std::borrow::Cow::Owned(self.to_le_bytes()),
        }
    }

    /// Reads `count` elements of `dtype` as little-endian bytes from `reader` straight into
    /// the typed storage: large weights (external data) are never held twice in memory.
    /// Types whose memory is not that layout (bool, 8/4/2-bit, strings) go through bytes.
    pub fn read_le(dtype: DataType, count: usize, reader: &mut impl std::io::Read) -> std::io::Result<TensorData> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let size = dtype.size_bytes().ok_or_else(|| invalid("the element type has no fixed byte size"))?;
        let bytes_len = count.checked_mul(size).ok_or_else(|| invalid("the byte count overflows"))?;
        let mut data = TensorData::zeros(dtype, count);
        if let Some(memory) = data.le_memory_mut() {
            reader.read_exact(memory)?;
            return Ok(data);
        }
        let mut bytes = vec![0u8; bytes_len];
        reader.read_exact(&mut bytes)?;
        TensorData::from_le_bytes(dtype, &bytes).ok_or_else(|| invalid("the bytes are not valid elements"))
    }

    /// The elements' memory as bytes, for the types whose memory is little-endian elements
    /// (none on a big-endian host).
    fn le_memory_mut(&mut self) -> Option<&mut [u8]> {
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match self {
            TensorData::F32(v) => bytemuck::cast_slice_mut(v),
            TensorData::F16(v) => bytemuck::cast_slice_mut(v),
            TensorData::BF16(v) => bytemuck::cast_slice_mut(v),
            TensorData::F64(v) => bytemuck::cast_slice_mut(v),
            TensorData::I8(v) => bytemuck::cast_slice_mut(v),
            TensorData::I16(v) => bytemuck::cast_slice_mut(v),
            TensorData::I32(v) => bytemuck::cast_slice_mut(v),
            TensorData::I64(v) => bytemuck::cast_slice_mut(v),
            TensorData::U8(v) => v,
            TensorData::U16(v) => bytemuck::cast_slice_mut(v),
            TensorData::U32(v) => bytemuck::cast_slice_mut(v),
            TensorData::U64(v) => bytemuck::cast_slice_mut(v),
            _ => return None,
        })
    }

    /// Parses little-endian bytes (the layout [`TensorData::to_le_bytes`] writes); `None`
    /// when the byte count is not a whole number of elements, a bool byte is not 0/1, or a
    /// 4- or 2-bit element byte has bits above its width.
    pub fn from_le_bytes(dtype: DataType, bytes: &[u8]) -> Option<TensorData> {
        let size = dtype.size_bytes().unwrap_or(1);
        if bytes.len() % size != 0 {
            return None;
        }
        // One copy on a little-endian host (the bytes are the elements' memory), element by
        // element elsewhere.
        macro_rules! parse {
            ($variant:ident, $t:ty) => {
                TensorData::$variant(if cfg!(target_endian = "little") {
                    let mut v: Vec<$t> = vec![<$t as bytemuck::Zeroable>::zeroed(); bytes.len() / size];
                    bytemuck::cast_slice_mut::<$t, u8>(&mut v).copy_from_slice(bytes);
                    v
                } else {
                    bytes
                        .chunks_exact(size)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of element size")))
                        .collect()
                })
            };
        }
        Some(match dtype {
            DataType::F32 => parse!(F32, f32),
            DataType::F16 => parse!(F16, f16),
            DataType::BF16 => parse!(BF16, bf16),
            DataType::F64 => parse!(F64, f64),
            DataType::I8 => parse!(I8, i8),
            DataType::I16 => parse!(I16, i16),
            DataType::I32 => parse!(I32, i32),
            DataType::I64 => parse!(I64, i64),
            DataType::U8 => TensorData::U8(bytes.to_vec()),
            DataType::U16 => parse!(U16, u16),
            DataType::U32 => parse!(U32, u32),
            DataType::U64 => parse!(U64, u64),
            DataType::F8E4M3FN => TensorData::F8E4M3FN(bytes.iter().map(|&b| F8E4M3FN(b)).collect()),
            DataType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(bytes.iter().map(|&b| F8E4M3FNUZ(b)).collect()),
            DataType::F8E5M2 => TensorData::F8E5M2(bytes.iter().map(|&b| F8E5M2(b)).collect()),
            DataType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(bytes.iter().map(|&b| F8E5M2FNUZ(b)).collect()),
            DataType::F8E8M0 => TensorData::F8E8M0(bytes.iter().map(|&b| F8E8M0(b)).collect()),
            DataType::F4E2M1 => TensorData::F4E2M1(sub_byte(bytes, 4, F4E2M1)?),
            DataType::I4 => TensorData::I4(sub_byte(bytes, 4, I4::from_bits)?),
            DataType::U4 => TensorData::U4(sub_byte(bytes, 4, U4::from_bits)?),
            DataType::I2 => TensorData::I2(sub_byte(bytes, 2, I2::from_bits)?),
            DataType::U2 => TensorData::U2(sub_byte(bytes, 2, U2::from_bits)?),
            DataType::String => return strings_from_le_bytes(bytes).map(TensorData::String),
            DataType::Bool => TensorData::Bool(
                bytes
                    .iter()
                    .map(|&b| match b {
                        0 => Some(false),
                        1 => Some(true),
                        _ => None,
                    })
                    .collect::<Option<Vec<bool>>>()?,
            ),
        })
    }
}

/// Length-prefixed UTF-8 strings (the layout [`TensorData::to_le_bytes`] writes); `None`
/// when a length runs past the end or a string is not UTF-8.
fn strings_from_le_bytes(mut bytes: &[u8]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let text = bytes.get(4..4 + len)?;
        out.push(String::from_utf8(text.to_vec()).ok()?);
        bytes = &bytes[4 + len..];
    }
    Some(out)
}

/// One element per byte of a `bits`-wide type; `None` when a byte has higher bits set.
fn sub_byte<T>(bytes: &[u8], bits: u32, make: impl Fn(u8) -> T) -> Option<Vec<T>> {
    bytes.iter().map(|&b| (b >> bits == 0).then(|| make(b))).collect()
}

/// A dense row-major tensor in host memory.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// Error building a [`HostTensor`] whose element count disagrees with its shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shape {shape:?} holds {expected} elements but {actual} were given")]
pub struct ShapeMismatch {
    pub shape: Vec<usize>,
    pub expected: usize,
    pub actual: usize,
}

impl HostTensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<HostTensor, ShapeMismatch> {
        let expected = shape.iter().product::<usize>();
        if expected != data.len() {
            return Err(ShapeMismatch { shape, expected, actual: data.len() });
        }
        Ok(HostTensor { shape, data })
    }

    /// A tensor of `dtype` and `shape` from its elements' little-endian bytes in C order (one
    /// byte per element for bool and the sub-byte types), as a caller's raw buffer holds
    /// them; the byte count must match exactly. Strings have no fixed size and are refused.
    pub fn from_le_bytes(dtype: DataType, shape: Vec<usize>, bytes: &[u8]) -> Result<HostTensor, String> {
        if dtype == DataType::String {
            return Err("strings have no fixed size: they cannot come as raw bytes".into());
        }
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or("the element count overflows")?;
        let expected = count.checked_mul(dtype.size_bytes().unwrap_or(1)).ok_or("the size overflows")?;
        if bytes.len() != expected {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            return Err(format!("it holds {} bytes but {dtype}[{}] takes {expected}", bytes.len(), dims.join(",")));
        }
        let data = TensorData::from_le_bytes(dtype, bytes).ok_or_else(|| format!("the bytes are not valid {dtype} values"))?;
        HostTensor::new(shape, data).map_err(|e| e.to_string())
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: DataType, shape: Vec<usize>) -> HostTensor {
        let n = shape.iter().product();
        HostTensor { shape, data: TensorData::zeros(dtype, n) }
    }

    pub fn from_f32(shape: Vec<usize>, values: Vec<f32>) -> Result<HostTensor, ShapeMismatch> {
        HostTensor::new(shape, TensorData::F32(values))
    }

    pub fn from_i64(shape: Vec<usize>, values: Vec<i64>) -> Result<HostTensor, ShapeMismatch> {
        HostTensor::new(shape, TensorData::I64(values))
    }

    /// A 0-D tensor.
    pub fn scalar(data: TensorData) -> Result<HostTensor, ShapeMismatch> {
        HostTensor::new(vec![], data)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn dtype(&self) -> DataType {
        self.data.dtype()
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// Overwrites the elements in place from little-endian `bytes` (see
    /// [`TensorData::overwrite_le_bytes`]); the shape stays.
    pub fn overwrite_le_bytes(&mut self, bytes: &[u8]) -> bool {
        self.data.overwrite_le_bytes(bytes)
    }

    pub fn into_data(self) -> TensorData {
        self.data
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes the elements occupy: the element size times the count, or for strings the
    /// UTF-8 bytes of all of them.
    pub fn size_bytes(&self) -> usize {
        match &self.data {
            TensorData::String(v) => v.iter().map(String::len).sum(),
            _ => self.len() * self.dtype().size_bytes().unwrap_or(0),
        }
    }

    /// The strings of a string tensor.
    pub fn as_strings(&self) -> Option<&[String]> {
        match &self.data {
            TensorData::String(v) => Some(v),
            _ => None,
        }
    }

    /// A string tensor.
    pub fn from_strings(shape: Vec<usize>, values: Vec<String>) -> Result<HostTensor, ShapeMismatch> {
        HostTensor::new(shape, TensorData::String(values))
    }

    /// The same elements under another shape with the same element count.
    pub fn reshaped(self, shape: Vec<usize>) -> Result<HostTensor, ShapeMismatch> {
        HostTensor::new(shape, self.data)
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Elements as i64, for index and shape tensors of any integer type.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match &self.data {
            TensorData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I16(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I64(v) => v.clone(),
            TensorData::U8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U16(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U64(v) => v.iter().map(|&x| i64::try_from(x).ok()).collect::<Option<_>>()?,
            TensorData::I4(v) => v.iter().map(|x| x.value()).collect(),
            TensorData::U4(v) => v.iter().map(|x| x.value()).collect(),
            TensorData::I2(v) => v.iter().map(|x| x.value()).collect(),
            TensorData::U2(v) => v.iter().map(|x| x.value()).collect(),
            _ => return None,
        })
    }

    /// Elements widened to f64 (bool as 0/1), for comparisons and summaries; strings,
    /// which have no numeric value, give NaN.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            TensorData::String(v) => vec![f64::NAN; v.len()],
            TensorData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::F64(v) => v.clone(),
            TensorData::I8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            TensorData::F8E4M3FN(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::F8E4M3FNUZ(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::F8E5M2(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::F8E5M2FNUZ(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::F8E8M0(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::F4E2M1(v) => v.iter().map(|x| x.to_f32() as f64).collect(),
            TensorData::I4(v) => v.iter().map(|x| x.value() as f64).collect(),
            TensorData::U4(v) => v.iter().map(|x| x.value() as f64).collect(),
            TensorData::I2(v) => v.iter().map(|x| x.value() as f64).collect(),
            TensorData::U2(v) => v.iter().map(|x| x.value() as f64).collect(),
        }
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        if let TensorData::String(v) = &self.data {
            let shown: Vec<&String> = v.iter().take(SHOWN).collect();
            return write!(f, "HostTensor<string>{:?} {shown:?}{}", self.shape, if v.len() > SHOWN { " …" } else { "" });
        }
        let values = self.to_f64_vec();
        write!(f, "HostTensor<{}>{:?} [", self.dtype(), self.shape)?;
        for (i, v) in values.iter().take(SHOWN).enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{v}")?;
        }
        if values.len() > SHOWN {
            write!(f, ", … {} more", values.len() - SHOWN)?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorData<{}>(len {})", self.dtype(), self.len())
    }
}
