//! Element types of kiln tensors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
///
/// The core set is the one TensorRT engines use (f32, f16, bf16, i8, u8, i32, i64, bool);
/// f64 and the remaining integer widths exist so that ONNX models using them import and run
/// on the cpu backend. The storage-only types after `Bool` (float8, e8m0, float4, 4- and
/// 2-bit integers; see [`crate::ir::narrow`]) hold one element per byte and support
/// conversions and data movement, not arithmetic. New variants go last: engine files
/// encode a variant by its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DataType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
    /// UTF-8 text, one string per element (ONNX STRING). Strings have no fixed byte size:
    /// they live in host tensors only, and kernels move and compare them but do no
    /// arithmetic on them.
    String,
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 24] = [
        DataType::F32,
        DataType::F16,
        DataType::BF16,
        DataType::F64,
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::Bool,
        DataType::F8E4M3FN,
        DataType::F8E4M3FNUZ,
        DataType::F8E5M2,
        DataType::F8E5M2FNUZ,
        DataType::F8E8M0,
        DataType::F4E2M1,
        DataType::I4,
        DataType::U4,
        DataType::I2,
        DataType::U2,
        DataType::String,
    ];

    /// Size of one element in bytes (bool and the sub-byte types are stored as one byte);
    /// `None` for [`DataType::String`], whose elements have no fixed size.
    pub fn size_bytes(self) -> Option<usize> {
        Some(match self {
            DataType::I8 | DataType::U8 | DataType::Bool => 1,
            DataType::F8E4M3FN
            | DataType::F8E4M3FNUZ
            | DataType::F8E5M2
            | DataType::F8E5M2FNUZ
            | DataType::F8E8M0
            | DataType::F4E2M1
            | DataType::I4
            | DataType::U4
            | DataType::I2
            | DataType::U2 => 1,
            DataType::F16 | DataType::BF16 | DataType::I16 | DataType::U16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
            DataType::String => return None,
        })
    }

    /// Whether elements are UTF-8 strings.
    pub fn is_string(self) -> bool {
        self == DataType::String
    }

    pub fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64)
    }

    /// The storage-only types: float8 (four kinds), e8m0, float4, and the 4- and 2-bit
    /// integers. Kernels convert and move them but do no arithmetic on them.
    pub fn is_narrow(self) -> bool {
        self.is_narrow_float() || self.is_narrow_integer()
    }

    /// float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float8 e8m0 and float4 e2m1.
    pub fn is_narrow_float(self) -> bool {
        matches!(
            self,
            DataType::F8E4M3FN
                | DataType::F8E4M3FNUZ
                | DataType::F8E5M2
                | DataType::F8E5M2FNUZ
                | DataType::F8E8M0
                | DataType::F4E2M1
        )
    }

    /// int8 and uint8: the levels of 8-bit quantization.
    pub fn is_8bit_integer(self) -> bool {
        matches!(self, DataType::I8 | DataType::U8)
    }

    /// int4, uint4, int2, uint2.
    pub fn is_narrow_integer(self) -> bool {
        matches!(self, DataType::I4 | DataType::U4 | DataType::I2 | DataType::U2)
    }

    /// Bits of information per element where fewer than the storage byte (4 or 2), else `None`.
    pub fn packed_bits(self) -> Option<u32> {
        match self {
            DataType::I4 | DataType::U4 | DataType::F4E2M1 => Some(4),
            DataType::I2 | DataType::U2 => Some(2),
            _ => None,
        }
    }

    /// Every integer type, the 4- and 2-bit ones included.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DataType::I8
                | DataType::I16
                | DataType::I32
                | DataType::I64
                | DataType::U8
                | DataType::U16
                | DataType::U32
                | DataType::U64
        ) || self.is_narrow_integer()
    }

    pub fn is_signed_integer(self) -> bool {
        matches!(self, DataType::I8 | DataType::I16 | DataType::I32 | DataType::I64 | DataType::I4 | DataType::I2)
    }

    /// Types usable as shape tensors and indices.
    pub fn is_index(self) -> bool {
        matches!(self, DataType::I32 | DataType::I64)
    }

    /// Lower-case short name, as printed in dumps and accepted by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::F64 => "f64",
            DataType::I8 => "i8",
            DataType::I16 => "i16",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::U8 => "u8",
            DataType::U16 => "u16",
            DataType::U32 => "u32",
            DataType::U64 => "u64",
            DataType::Bool => "bool",
            DataType::F8E4M3FN => "f8e4m3fn",
            DataType::F8E4M3FNUZ => "f8e4m3fnuz",
            DataType::F8E5M2 => "f8e5m2",
            DataType::F8E5M2FNUZ => "f8e5m2fnuz",
            DataType::F8E8M0 => "f8e8m0",
            DataType::F4E2M1 => "f4e2m1",
            DataType::I4 => "i4",
            DataType::U4 => "u4",
            DataType::I2 => "i2",
            DataType::U2 => "u2",
            DataType::String => "string",
        }
    }

    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
