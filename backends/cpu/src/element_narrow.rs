//! [`Elem`] for kiln's storage-only types (float8, e8m0, float4, 4- and 2-bit integers):
//! they convert and move like any element but have no arithmetic.
//!
//! Cast semantics follow the ONNX reference (`ml_dtypes`): to a narrow float, round to
//! nearest even and saturate (ONNX's default `saturate=1`; e8m0 rounds up); to a 4- or
//! 2-bit integer, truncate toward zero and keep the low bits, NaN and infinities giving 0.

use crate::element::{Elem, Scalar};
use kiln::{
    DataType, E8M0Rounding, TensorData, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4,
};

fn scalar_to_f64(value: Scalar) -> f64 {
    match value {
        Scalar::Float(v) => v,
        Scalar::Int(i) => i as f64,
    }
}

macro_rules! storage {
    ($t:ident) => {
        const DTYPE: DataType = DataType::$t;
        fn pack(values: Vec<Self>) -> TensorData {
            TensorData::$t(values)
        }
        fn view(data: &TensorData) -> Option<&[Self]> {
            match data {
                TensorData::$t(v) => Some(v),
                _ => None,
            }
        }
    };
}

macro_rules! narrow_float_elem {
    ($($t:ident),*) => {$(
        impl Elem for $t {
            storage!($t);
            fn to_scalar(self) -> Scalar {
                Scalar::Float(f64::from(self.to_f32()))
            }
            fn from_scalar(value: Scalar) -> Self {
                $t::from_f64(scalar_to_f64(value), true)
            }
            fn zero() -> Self {
                $t::from_f64(0.0, true)
            }
        }
    )*};
}
narrow_float_elem!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F4E2M1);

impl Elem for F8E8M0 {
    storage!(F8E8M0);
    fn to_scalar(self) -> Scalar {
        Scalar::Float(f64::from(self.to_f32()))
    }
    fn from_scalar(value: Scalar) -> Self {
        F8E8M0::from_f64(scalar_to_f64(value), true, E8M0Rounding::Up)
    }
    /// The smallest power, 2^-127 (the code a Cast of 0 gives).
    fn zero() -> Self {
        F8E8M0(0)
    }
}

macro_rules! narrow_int_elem {
    ($($t:ident),*) => {$(
        impl Elem for $t {
            storage!($t);
            fn to_scalar(self) -> Scalar {
                Scalar::Int(i128::from(self.value()))
            }
            fn from_scalar(value: Scalar) -> Self {
                match value {
                    Scalar::Float(v) if !v.is_finite() => $t::default(),
                    Scalar::Float(v) => $t::wrapping(v.trunc() as i128),
                    Scalar::Int(i) => $t::wrapping(i),
                }
            }
            fn zero() -> Self {
                $t::default()
            }
        }
    )*};
}
narrow_int_elem!(I4, U4, I2, U2);

/// Converts one element to a narrow float type with explicit overflow and e8m0 rounding
/// (Cast `saturate` / `round_mode`); `None` for a target that is not a narrow float.
pub fn cast_narrow_float(
    values: &[Scalar],
    to: DataType,
    saturate: bool,
    rounding: E8M0Rounding,
) -> Option<TensorData> {
    let f = values.iter().map(|&v| scalar_to_f64(v));
    Some(match to {
        DataType::F8E4M3FN => TensorData::F8E4M3FN(f.map(|v| F8E4M3FN::from_f64(v, saturate)).collect()),
        DataType::F8E4M3FNUZ => TensorData::F8E4M3FNUZ(f.map(|v| F8E4M3FNUZ::from_f64(v, saturate)).collect()),
        DataType::F8E5M2 => TensorData::F8E5M2(f.map(|v| F8E5M2::from_f64(v, saturate)).collect()),
        DataType::F8E5M2FNUZ => TensorData::F8E5M2FNUZ(f.map(|v| F8E5M2FNUZ::from_f64(v, saturate)).collect()),
        DataType::F8E8M0 => TensorData::F8E8M0(f.map(|v| F8E8M0::from_f64(v, saturate, rounding)).collect()),
        DataType::F4E2M1 => TensorData::F4E2M1(f.map(|v| F4E2M1::from_f64(v, saturate)).collect()),
        _ => return None,
    })
}
