//! INT8 quantization (seed §6.5, "implicit quantization"): per-tensor dynamic ranges, set by
//! hand ([`crate::Network::set_dynamic_range`]) or measured by calibration
//! ([`crate::builder::calibrate`], with the methods of [`calibrate`]), kept in a calibration
//! cache file ([`CalibrationTable`]), and the builder step that makes a network read its
//! convolution and matrix-product inputs as INT8 ([`implicit`]).
//!
//! INT8 here is symmetric, as TensorRT's: a tensor of range `[-amax, amax]` is stored as
//! `round(x / scale)` clamped to `[-127, 127]` with `scale = amax / 127`; weights take one
//! scale per output channel. The step writes that as QuantizeLinear / DequantizeLinear
//! layers, so every backend computes exactly what INT8 arithmetic gives.

pub mod calibrate;
pub mod implicit;
mod table;

pub use calibrate::{CalibrationData, CalibrationMethod};
pub use table::{CalibrationError, CalibrationTable};

/// The largest INT8 magnitude a symmetric quantization uses.
pub const INT8_MAX: f32 = 127.0;

/// The scale of a symmetric INT8 range `[-amax, amax]` (1 for an empty range, so zeros stay
/// zeros and nothing divides by zero).
pub fn int8_scale(amax: f32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        amax / INT8_MAX
    } else {
        1.0
    }
}
