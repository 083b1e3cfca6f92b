//! Element types of kiln tensors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
///
/// The core set is the one TensorRT engines use (f32, f16, bf16, i8, u8, i32, i64, bool);
/// f64 and the remaining integer widths exist so that ONNX models using them import and run
/// on the cpu backend.
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
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 13] = [
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
    ];

    /// Size of one element in bytes (bool is stored as one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::Bool => 1,
            DataType::F16 | DataType::BF16 | DataType::I16 | DataType::U16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64)
    }

    pub fn is_integer(self) -> bool {
        !self.is_float() && self != DataType::Bool
    }

    pub fn is_signed_integer(self) -> bool {
        matches!(self, DataType::I8 | DataType::I16 | DataType::I32 | DataType::I64)
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
