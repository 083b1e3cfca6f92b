//! Layers whose output size depends on the input's values (`kernels/nonzero.cu`): a device
//! pass counts, the count is read back to the host once (so networks holding these layers are
//! never captured as CUDA graphs: see `exec::graph_blocker`), then the output is allocated and
//! a second pass fills it.

use kiln::{invalid, DataType, KernelError};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// Whether a device layer of `kind` reads a count back to size its output (which a CUDA graph
/// capture cannot do): NonZero; NonMaxSuppression, which runs on host copies; and an
/// Assertion on a device value, which the layer driver checks on the host.
pub fn reads_back(kind: &kiln::LayerKind) -> bool {
    matches!(kind, kiln::LayerKind::NonZero | kiln::LayerKind::NonMaxSuppression { .. } | kiln::LayerKind::Assertion { .. })
}

/// Element widths of `nonzero_count_*` / `nonzero_fill_*`.
pub const WIDTHS: [&str; 4] = ["u8", "u16", "u32", "u64"];

/// Threads of the one block that counts and fills (`NONZERO_THREADS` in kernels/nonzero.cu).
const THREADS: usize = 1024;

/// `(width suffix, mask)` for NonZero on `dtype`: an element is nonzero where its bits under
/// the mask are (a float's sign bit is masked off: -0.0 is zero, NaN is not).
pub fn nonzero_bits(dtype: DataType) -> KResult<(&'static str, u64)> {
    Ok(match dtype {
        DataType::F32 => ("u32", 0x7fff_ffff),
        DataType::F16 | DataType::BF16 => ("u16", 0x7fff),
        DataType::F64 => ("u64", 0x7fff_ffff_ffff_ffff),
        DataType::Bool | DataType::I8 | DataType::U8 => ("u8", u64::MAX),
        DataType::I16 | DataType::U16 => ("u16", u64::MAX),
        DataType::I32 | DataType::U32 => ("u32", u64::MAX),
        DataType::I64 | DataType::U64 => ("u64", u64::MAX),
        other => return Err(invalid!("NonZero on {other} has no CUDA kernel")),
    })
}

/// NonZero: the coordinates of the nonzero elements of `x`, [rank, count] i64, in row-major
/// element order.
pub fn nonzero(cx: &Ctx, x: &DeviceTensor) -> KResult<DeviceTensor> {
    let (width, mask) = nonzero_bits(x.dtype)?;
    let n = x.len();
    let rank = x.shape.len();
    let offsets = cx.gpu.empty(DataType::I64, vec![THREADS + 1]).map_err(KernelError::from)?;
    let count_args = [Arg::I64(n as i64), Arg::I64(mask as i64), cx.arg(x), cx.arg(&offsets)];
    cx.gpu.launch(&Source::NonZero.kernel(format!("nonzero_count_{width}")), 1, THREADS as u32, &count_args).map_err(KernelError::from)?;
    // The one read-back: the total decides the output's shape.
    let host = cx.gpu.download(&offsets).map_err(KernelError::from)?;
    let total = host.to_i64_vec().and_then(|v| v.last().copied()).ok_or("NonZero's count did not come back")?;
    let total = usize::try_from(total).map_err(|_| invalid!("NonZero counted {total} elements"))?;
    let out = cx.gpu.empty(DataType::I64, vec![rank, total]).map_err(KernelError::from)?;
    if rank == 0 || total == 0 {
        return Ok(out);
    }
    let shape = super::signal::upload_i64(cx, x.shape.iter().map(|&d| d as i64).collect())?;
    let fill_args = [
        Arg::I64(n as i64),
        Arg::I64(mask as i64),
        Arg::I32(rank as i32),
        cx.arg(&shape),
        Arg::I64(total as i64),
        cx.arg(x),
        cx.arg(&offsets),
        cx.arg(&out),
    ];
    cx.gpu.launch(&Source::NonZero.kernel(format!("nonzero_fill_{width}")), 1, THREADS as u32, &fill_args).map_err(KernelError::from)?;
    Ok(out)
}
