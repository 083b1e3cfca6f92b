//! Safe conversions between kiln's plugin types and the C ABI's plain data.

use kiln::plugin::{DimExpr, PluginTensorDesc};
use kiln::{DataType, PluginField, TensorFormat};
use kiln_plugin_abi as abi;

const DTYPE_CODES: [(i32, DataType); 13] = [
    (abi::dtype::F32, DataType::F32),
    (abi::dtype::U8, DataType::U8),
    (abi::dtype::I8, DataType::I8),
    (abi::dtype::U16, DataType::U16),
    (abi::dtype::I16, DataType::I16),
    (abi::dtype::I32, DataType::I32),
    (abi::dtype::I64, DataType::I64),
    (abi::dtype::BOOL, DataType::Bool),
    (abi::dtype::F16, DataType::F16),
    (abi::dtype::F64, DataType::F64),
    (abi::dtype::U32, DataType::U32),
    (abi::dtype::U64, DataType::U64),
    (abi::dtype::BF16, DataType::BF16),
];

pub fn dtype_code(dtype: DataType) -> Result<i32, String> {
    DTYPE_CODES
        .iter()
        .find(|(_, d)| *d == dtype)
        .map(|(c, _)| *c)
        .ok_or_else(|| format!("{dtype} has no plugin ABI code"))
}

pub fn dtype_of(code: i32) -> Result<DataType, String> {
    DTYPE_CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, d)| *d)
        .ok_or_else(|| format!("unknown element type code {code}"))
}

pub fn tensor_desc(d: &PluginTensorDesc) -> Result<abi::kiln_tensor_desc, String> {
    if d.dims.len() > abi::KILN_MAX_RANK {
        return Err(format!("rank {} exceeds the plugin ABI's {}", d.dims.len(), abi::KILN_MAX_RANK));
    }
    if d.format != TensorFormat::Linear {
        return Err(format!("format {:?} is not in plugin ABI 1 (LINEAR only)", d.format));
    }
    let mut dims = [0i64; abi::KILN_MAX_RANK];
    for (slot, dim) in dims.iter_mut().zip(&d.dims) {
        *slot = dim.map_or(-1, |n| n as i64);
    }
    Ok(abi::kiln_tensor_desc { dtype: dtype_code(d.dtype)?, format: 0, rank: d.dims.len() as i32, dims })
}

/// The expression tree of node `index` (nodes refer only to earlier nodes).
pub fn dim_expr(nodes: &[abi::kiln_dim_expr], index: i32) -> Result<DimExpr, String> {
    let node = usize::try_from(index)
        .ok()
        .and_then(|i| nodes.get(i))
        .ok_or_else(|| format!("dim node {index} does not exist"))?;
    let child = |c: i32| -> Result<Box<DimExpr>, String> {
        if c >= index {
            return Err(format!("dim node {index} refers to node {c}, which is not earlier"));
        }
        dim_expr(nodes, c).map(Box::new)
    };
    let non_negative =
        |v: i32, what: &str| usize::try_from(v).map_err(|_| format!("dim node {index}: negative {what} {v}"));
    Ok(match node.op {
        abi::KILN_DIM_CONST => DimExpr::Const(node.value),
        abi::KILN_DIM_INPUT => {
            DimExpr::Input { input: non_negative(node.a, "input")?, axis: non_negative(node.b, "axis")? }
        }
        abi::KILN_DIM_ADD => DimExpr::Add(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_SUB => DimExpr::Sub(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_MUL => DimExpr::Mul(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_FLOOR_DIV => DimExpr::FloorDiv(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_CEIL_DIV => DimExpr::CeilDiv(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_MAX => DimExpr::Max(child(node.a)?, child(node.b)?),
        abi::KILN_DIM_MIN => DimExpr::Min(child(node.a)?, child(node.b)?),
        op => return Err(format!("dim node {index} has unknown op {op}")),
    })
}

/// A field's C type code.
pub fn field_type_code(field: &PluginField) -> i32 {
    match field {
        PluginField::F32(_) => abi::KILN_FIELD_F32,
        PluginField::F64(_) => abi::KILN_FIELD_F64,
        PluginField::I32(_) => abi::KILN_FIELD_I32,
        PluginField::I64(_) => abi::KILN_FIELD_I64,
        PluginField::Bytes(_) => abi::KILN_FIELD_BYTES,
        PluginField::Text(_) => abi::KILN_FIELD_TEXT,
    }
}

/// A field's element count and data pointer (valid while `field` lives).
pub fn field_data(field: &PluginField) -> (i64, *const std::ffi::c_void) {
    match field {
        PluginField::F32(v) => (v.len() as i64, v.as_ptr().cast()),
        PluginField::F64(v) => (v.len() as i64, v.as_ptr().cast()),
        PluginField::I32(v) => (v.len() as i64, v.as_ptr().cast()),
        PluginField::I64(v) => (v.len() as i64, v.as_ptr().cast()),
        PluginField::Bytes(v) => (v.len() as i64, v.as_ptr().cast()),
        PluginField::Text(s) => (s.len() as i64, s.as_ptr().cast()),
    }
}

pub fn field_type_of(code: i32) -> Result<kiln::plugin::FieldType, String> {
    use kiln::plugin::FieldType as F;
    Ok(match code {
        abi::KILN_FIELD_F32 => F::F32,
        abi::KILN_FIELD_F64 => F::F64,
        abi::KILN_FIELD_I32 => F::I32,
        abi::KILN_FIELD_I64 => F::I64,
        abi::KILN_FIELD_BYTES => F::Bytes,
        abi::KILN_FIELD_TEXT => F::Text,
        other => return Err(format!("unknown field type code {other}")),
    })
}
