//! OneHot and reflect / edge / wrap Padding: data movement of raw 32-bit words.

use super::{count_word, output, strides, words8, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::PaddingMode;

/// OneHot along `axis` of the output: `values` holds `[off, on]`; `depth` wraps negative
/// indices once.
pub fn one_hot(
    rec: &Recorder,
    indices: &DeviceTensor,
    values: &DeviceTensor,
    depth: i64,
    axis: usize,
    shape: &[usize],
    dtype: kiln::DataType,
) -> KResult<DeviceTensor> {
    if !matches!(indices.dtype, kiln::DataType::I32 | kiln::DataType::I64) {
        return Err(kiln::invalid!("OneHot indices must be i32/i64, not {}", indices.dtype));
    }
    if values.len() != 2 {
        return Err(kiln::invalid!("OneHot values must hold [off, on], got {} elements", values.len()));
    }
    let depth_len = *shape.get(axis).ok_or_else(|| kiln::invalid!("OneHot axis {axis} is out of range for {shape:?}"))?;
    let depth = i32::try_from(depth).map_err(|_| kiln::invalid!("OneHot depth {depth} exceeds 32 bits"))?;
    let inner: usize = shape[axis + 1..].iter().product();
    let out = output(rec, dtype, shape)?;
    let params = [count_word(out.len())?, count_word(depth_len.max(1))?, count_word(inner.max(1))?, depth as u32];
    rec.dispatch_1d(&Instance::plain("one_hot"), &params, &[&indices.buffer, &values.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// Reflect, edge or wrap padding: `pads` holds the begins then the ends (negative values
/// crop first, as on the cpu backend).
pub fn pad_mode(
    rec: &Recorder,
    x: &DeviceTensor,
    mode: PaddingMode,
    pads: &[i64],
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let rank = x.shape.len();
    let mode_word = match mode {
        PaddingMode::Reflect => 0,
        PaddingMode::Edge => 1,
        PaddingMode::Wrap => 2,
        PaddingMode::Constant => return Err("constant padding has its own kernel".into()),
    };
    let axes = kiln::plan::pad::axes(&x.shape, pads, shape)?;
    if let Some(d) = (0..rank).find(|&d| axes[d].kept == 0 && shape[d] > 0) {
        return Err(kiln::invalid!("{mode:?} padding needs a non-empty axis {d}"));
    }
    let begin: Vec<usize> = axes.iter().map(|a| a.begin).collect();
    let lo: Vec<usize> = axes.iter().map(|a| a.lo).collect();
    let kept: Vec<usize> = axes.iter().map(|a| a.kept).collect();
    let out = output(rec, x.dtype, shape)?;
    let mut params = vec![count_word(out.len())?, rank as u32, mode_word];
    for v in [shape, begin.as_slice(), lo.as_slice(), kept.as_slice(), strides(&x.shape).as_slice()] {
        params.extend(words8(v)?);
    }
    rec.dispatch_1d(&Instance::plain("pad_mode"), &params, &[&x.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// Every kernel of this module, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    vec![Instance::plain("one_hot"), Instance::plain("pad_mode")]
}
