//! f16 tensors stored as halves ([`Packing::Half`]) and the f32 words every other kernel
//! reads: the two conversions of the executor's generic widen/narrow path.

use super::{count_word, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Packing, Recorder};
use kiln::DataType;

/// `t` as f32 words (exact); word tensors come back as they are.
pub fn widen(rec: &Recorder, t: &DeviceTensor) -> KResult<DeviceTensor> {
    if t.packing == Packing::Word {
        return Ok(t.clone());
    }
    let out = rec.alloc(DataType::F16, &t.shape).map_err(|e| e.to_string())?;
    let n = t.len();
    rec.dispatch_1d(&Instance::f16_conversion(false), &[count_word(n)?], &[&t.buffer, &out.buffer], n)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The f16 word tensor `t` as halves, rounded to nearest even (infinity beyond the f16
/// range); tensors of other types or already halves come back as they are.
pub fn to_halves(rec: &Recorder, t: DeviceTensor) -> KResult<DeviceTensor> {
    if t.dtype != DataType::F16 || t.packing == Packing::Half {
        return Ok(t);
    }
    let out = rec.alloc_halves(&t.shape).map_err(|e| e.to_string())?;
    let n = t.len();
    rec.dispatch_1d(&Instance::f16_conversion(true), &[count_word(n)?], &[&t.buffer, &out.buffer], n)
        .map_err(|e| e.to_string())?;
    Ok(out)
}
