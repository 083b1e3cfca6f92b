//! Memory layouts of tensors at the network boundary (seed §6.6).
//!
//! Inside an engine every tensor is LINEAR. A network input or output may allow other
//! layouts through a bitmask ([`FormatMask`]); the builder picks one the tensor's data type
//! allows (the seed's table, [`TensorFormat::allows`]) and inserts a `Reformat` layer at the
//! boundary unless the backend consumes the layout directly.
//!
//! # Physical shapes
//! A tensor in a vectorized or channel-last layout is passed as a [`HostTensor`] whose
//! shape is its *physical* shape. For a logical `[…, C, H, W]` (3-D formats: `[…, C, D, H, W]`)
//! with vector size `v`:
//!
//! | format                      | physical shape                         |
//! |-----------------------------|----------------------------------------|
//! | CHW2, CHW4, CHW16, CHW32    | `[…, ceil(C/v), H, W, v]`              |
//! | CDHW32                      | `[…, ceil(C/32), D, H, W, 32]`         |
//! | HWC8, HWC16                 | `[…, H, W, ceil(C/v)·v]`               |
//! | DHWC8                       | `[…, D, H, W, ceil(C/8)·8]`            |
//! | HWC                         | `[…, H, W, C]`                         |
//!
//! So a CHW4 f16 input of logical shape `N×3×H×W` is passed as `N×1×H×W×4`. The padded
//! channels (here C = 3) must hold zeros; reformatting to LINEAR drops them, reformatting
//! from LINEAR writes zeros there.

use super::dtype::DataType;
use super::shape::{Dim, Shape};
use super::tensor::{HostTensor, TensorData};
use serde::{Deserialize, Serialize};

/// A tensor memory layout. The discriminants are TensorRT's `TensorFormat` values, so a
/// mask bit means the same format in both (the two DLA formats, 9 and 10, do not exist here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TensorFormat {
    /// Row-major, as the dims say.
    #[default]
    Linear = 0,
    /// Two-wide channel vectorized row major.
    Chw2 = 1,
    /// Channel-last, channels padded to a multiple of 8.
    Hwc8 = 2,
    Chw4 = 3,
    Chw16 = 4,
    Chw32 = 5,
    /// Channel-last over three spatial dims, channels padded to a multiple of 8 (the seed's
    /// table spells it DHW8; TensorRT's enum and kiln call it DHWC8).
    Dhwc8 = 6,
    /// Thirty-two-wide channel vectorized over three spatial dims.
    Cdhw32 = 7,
    /// Channel-last, no padding.
    Hwc = 8,
    /// Channel-last, channels padded to a multiple of 16.
    Hwc16 = 11,
}

impl TensorFormat {
    /// Every format, in TensorRT enum order.
    pub const ALL: [TensorFormat; 10] = [
        TensorFormat::Linear,
        TensorFormat::Chw2,
        TensorFormat::Hwc8,
        TensorFormat::Chw4,
        TensorFormat::Chw16,
        TensorFormat::Chw32,
        TensorFormat::Dhwc8,
        TensorFormat::Cdhw32,
        TensorFormat::Hwc,
        TensorFormat::Hwc16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TensorFormat::Linear => "LINEAR",
            TensorFormat::Chw2 => "CHW2",
            TensorFormat::Chw4 => "CHW4",
            TensorFormat::Hwc8 => "HWC8",
            TensorFormat::Chw16 => "CHW16",
            TensorFormat::Chw32 => "CHW32",
            TensorFormat::Dhwc8 => "DHWC8",
            TensorFormat::Cdhw32 => "CDHW32",
            TensorFormat::Hwc => "HWC",
            TensorFormat::Hwc16 => "HWC16",
        }
    }

    /// Parses a name (case-insensitive; `DHW8` is accepted for DHWC8, as the seed spells it).
    pub fn from_name(name: &str) -> Option<TensorFormat> {
        let upper = name.to_ascii_uppercase();
        if upper == "DHW8" {
            return Some(TensorFormat::Dhwc8);
        }
        TensorFormat::ALL.into_iter().find(|f| f.name() == upper)
    }

    /// This format's bit in a [`FormatMask`] (`1 << TensorRT's enum value`).
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Whether a tensor of `dtype` may use this format at the network boundary: the seed's
    /// table of supported I/O formats. "Only for GPU" entries count as allowed; whether a
    /// backend consumes them without a reformat is [`crate::Backend::consumes_io_format`].
    /// Types outside the table (bf16, i64, bool, …) are LINEAR only.
    pub fn allows(self, dtype: DataType) -> bool {
        use DataType as D;
        use TensorFormat as F;
        match self {
            F::Linear => true,
            F::Chw2 | F::Hwc8 | F::Chw16 | F::Dhwc8 | F::Hwc16 => dtype == D::F16,
            F::Chw4 => matches!(dtype, D::F16 | D::I8),
            F::Chw32 => matches!(dtype, D::F32 | D::F16 | D::I8),
            F::Cdhw32 => matches!(dtype, D::F16 | D::I8),
            F::Hwc => dtype == D::F32,
        }
    }

    /// The data types this format allows, for error messages.
    pub fn allowed_types(self) -> Vec<DataType> {
        DataType::ALL.into_iter().filter(|&d| self.allows(d)).collect()
    }

    /// Elements per channel vector (channel padding granularity); 1 for LINEAR and HWC.
    pub fn vector_size(self) -> usize {
        match self {
            TensorFormat::Linear | TensorFormat::Hwc => 1,
            TensorFormat::Chw2 => 2,
            TensorFormat::Chw4 => 4,
            TensorFormat::Hwc8 | TensorFormat::Dhwc8 => 8,
            TensorFormat::Chw16 | TensorFormat::Hwc16 => 16,
            TensorFormat::Chw32 | TensorFormat::Cdhw32 => 32,
        }
    }

    /// Spatial dims after the channel dim: 3 for the volume formats, 2 for the image
    /// formats, 0 for LINEAR (which has no channel dim).
    pub fn spatial_rank(self) -> usize {
        match self {
            TensorFormat::Linear => 0,
            TensorFormat::Dhwc8 | TensorFormat::Cdhw32 => 3,
            _ => 2,
        }
    }

    /// Channel-last layouts (HWC, HWC8, HWC16, DHWC8); the others vectorize channels in
    /// blocks placed innermost.
    pub fn is_channel_last(self) -> bool {
        matches!(self, TensorFormat::Hwc | TensorFormat::Hwc8 | TensorFormat::Hwc16 | TensorFormat::Dhwc8)
    }

    /// The engine inspector's description, TensorRT style
    /// ("Thirty-two wide channel vectorized row major Int8 format.").
    pub fn describe(self, dtype: DataType) -> String {
        let t = inspector_type_name(dtype);
        match self {
            TensorFormat::Linear => format!("Row major linear {t} format"),
            TensorFormat::Chw2 => format!("Two wide channel vectorized row major {t} format"),
            TensorFormat::Chw4 => format!("Four wide channel vectorized row major {t} format"),
            TensorFormat::Chw16 => format!("Sixteen wide channel vectorized row major {t} format"),
            TensorFormat::Chw32 => format!("Thirty-two wide channel vectorized row major {t} format"),
            TensorFormat::Cdhw32 => format!("Thirty-two wide channel vectorized row major {t} format (CDHW32)"),
            TensorFormat::Hwc => format!("Channel major {t} format"),
            TensorFormat::Hwc8 => format!("Channel major {t} format where channel % 8 == 0"),
            TensorFormat::Hwc16 => format!("Channel major {t} format where channel % 16 == 0"),
            TensorFormat::Dhwc8 => format!("Channel major {t} format where channel % 8 == 0 (DHWC8)"),
        }
    }

    /// The axis of the channel dim in a logical shape of `rank`, if the format applies.
    fn channel_axis(self, rank: usize) -> Option<usize> {
        rank.checked_sub(self.spatial_rank() + 1)
    }

    /// The physical shape of a tensor of logical shape `logical` in this format (see the
    /// module docs). The channel dim must be fixed; other dims may be symbolic.
    pub fn physical_shape(self, logical: &Shape) -> Result<Shape, FormatError> {
        if self == TensorFormat::Linear {
            return Ok(logical.clone());
        }
        let rank = logical.rank();
        let c_axis = self.channel_axis(rank).ok_or(FormatError::Rank { format: self, rank })?;
        let c = logical.dims()[c_axis].fixed().ok_or(FormatError::DynamicChannels { format: self })?;
        let v = self.vector_size();
        let padded = padded_channels(self, c)?;
        let mut dims: Vec<Dim> = logical.dims()[..c_axis].to_vec();
        let spatial = &logical.dims()[c_axis + 1..];
        if self.is_channel_last() {
            dims.extend_from_slice(spatial);
            dims.push(Dim::Fixed(padded));
        } else {
            dims.push(Dim::Fixed(c.div_ceil(v)));
            dims.extend_from_slice(spatial);
            dims.push(Dim::Fixed(v));
        }
        Ok(Shape(dims))
    }

    /// The logical shape of a tensor of physical shape `physical` holding `channels`
    /// channels in this format; the inverse of [`TensorFormat::physical_shape`].
    pub fn logical_shape(self, physical: &Shape, channels: usize) -> Result<Shape, FormatError> {
        if self == TensorFormat::Linear {
            return Ok(physical.clone());
        }
        let rank = physical.rank();
        let s = self.spatial_rank();
        let v = self.vector_size();
        // Physical dims after the leading ones: spatial and packed channels, plus the vector
        // for the channel-blocked layouts.
        let inner_dims = if self.is_channel_last() { s + 1 } else { s + 2 };
        let lead = rank.checked_sub(inner_dims).ok_or(FormatError::Rank { format: self, rank })?;
        let d = physical.dims();
        let (packed, spatial, inner) = if self.is_channel_last() {
            (&d[rank - 1], &d[lead..rank - 1], None)
        } else {
            (&d[lead], &d[lead + 1..rank - 1], Some(&d[rank - 1]))
        };
        let expected_packed = if self.is_channel_last() { padded_channels(self, channels)? } else { channels.div_ceil(v) };
        if packed.differs_from(&Dim::Fixed(expected_packed)) || inner.is_some_and(|i| i.differs_from(&Dim::Fixed(v))) {
            return Err(FormatError::PhysicalShape { format: self, shape: physical.text(), channels });
        }
        let mut dims = d[..lead].to_vec();
        dims.push(Dim::Fixed(channels));
        dims.extend_from_slice(spatial);
        Ok(Shape(dims))
    }
}

/// `channels` rounded up to whole vectors; an error (not an overflow) for absurd counts,
/// which only a hostile engine file holds.
fn padded_channels(format: TensorFormat, channels: usize) -> Result<usize, FormatError> {
    let v = format.vector_size();
    channels.div_ceil(v).checked_mul(v).ok_or(FormatError::PhysicalShape { format, shape: String::new(), channels })
}

/// The type names the engine inspector prints (TensorRT's spelling).
pub fn inspector_type_name(dtype: DataType) -> &'static str {
    match dtype {
        DataType::F32 => "FP32",
        DataType::F16 => "FP16",
        DataType::BF16 => "BF16",
        DataType::F64 => "FP64",
        DataType::I8 => "Int8",
        DataType::I16 => "Int16",
        DataType::I32 => "Int32",
        DataType::I64 => "Int64",
        DataType::U8 => "UInt8",
        DataType::U16 => "UInt16",
        DataType::U32 => "UInt32",
        DataType::U64 => "UInt64",
        DataType::Bool => "Bool",
        DataType::F8E4M3FN => "FP8",
        DataType::F8E4M3FNUZ => "FP8E4M3FNUZ",
        DataType::F8E5M2 => "FP8E5M2",
        DataType::F8E5M2FNUZ => "FP8E5M2FNUZ",
        DataType::F8E8M0 => "E8M0",
        DataType::F4E2M1 => "FP4",
        DataType::I4 => "Int4",
        DataType::U4 => "UInt4",
        DataType::I2 => "Int2",
        DataType::U2 => "UInt2",
        DataType::String => "String",
    }
}

/// A set of allowed formats, one bit per format (`1 << TensorRT's enum value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FormatMask(pub u32);

impl Default for FormatMask {
    /// LINEAR only, as TensorRT's default for network I/O.
    fn default() -> FormatMask {
        FormatMask(TensorFormat::Linear.bit())
    }
}

impl FormatMask {
    pub fn of(formats: &[TensorFormat]) -> FormatMask {
        FormatMask(formats.iter().fold(0, |m, f| m | f.bit()))
    }

    pub fn contains(self, format: TensorFormat) -> bool {
        self.0 & format.bit() != 0
    }

    /// The formats in the mask, in TensorRT enum order.
    pub fn formats(self) -> Vec<TensorFormat> {
        TensorFormat::ALL.into_iter().filter(|&f| self.contains(f)).collect()
    }

    /// Bits that name no format kiln knows (the DLA formats, or garbage).
    pub fn unknown_bits(self) -> u32 {
        self.0 & !TensorFormat::ALL.iter().fold(0, |m, f| m | f.bit())
    }

    pub fn names(self) -> String {
        let names: Vec<&str> = self.formats().into_iter().map(TensorFormat::name).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join("|")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("format {} needs a channel dim followed by {} spatial dims; a rank-{rank} tensor has none", .format.name(), .format.spatial_rank())]
    Rank { format: TensorFormat, rank: usize },
    #[error("format {} pads the channel dim, which must therefore be fixed at build time", .format.name())]
    DynamicChannels { format: TensorFormat },
    #[error("shape {shape} is not a {} layout of {channels} channels", .format.name())]
    PhysicalShape { format: TensorFormat, shape: String, channels: usize },
}

/// Converts `x` (physical layout of `from`) to the physical layout of `to`, where the
/// logical tensor has `channels` channels. Padding channels are dropped on the way to
/// LINEAR and written as zeros on the way out of it.
pub fn reformat(x: &HostTensor, from: TensorFormat, to: TensorFormat, channels: usize) -> Result<HostTensor, FormatError> {
    let physical_in = Shape::fixed(x.shape());
    let logical = from.logical_shape(&physical_in, channels)?;
    let logical_dims = logical.as_fixed().expect("a fixed physical shape has a fixed logical shape");
    let physical_out = to.physical_shape(&logical)?.as_fixed().expect("fixed logical shape");
    let volume = |d: &[usize]| d.iter().product::<usize>();
    let mut out = TensorData::zeros(x.dtype(), volume(&physical_out));
    let src_index = offsets(from, &logical_dims, x.shape());
    let dst_index = offsets(to, &logical_dims, &physical_out);
    copy_elements(x.data(), &mut out, &src_index, &dst_index);
    Ok(HostTensor::new(physical_out, out).expect("element count follows the shape"))
}

/// For every logical element in row-major order, its offset in the physical layout.
fn offsets(format: TensorFormat, logical: &[usize], physical: &[usize]) -> Vec<usize> {
    let n = logical.iter().product::<usize>();
    let rank = logical.len();
    let mut out = Vec::with_capacity(n);
    if format == TensorFormat::Linear {
        out.extend(0..n);
        return out;
    }
    let c_axis = rank - format.spatial_rank() - 1;
    let v = format.vector_size();
    let strides = row_major_strides(physical);
    let mut idx = vec![0usize; rank];
    for _ in 0..n {
        let c = idx[c_axis];
        let mut offset: usize = idx[..c_axis].iter().zip(&strides).map(|(i, s)| i * s).sum();
        if format.is_channel_last() {
            // physical: [lead…, spatial…, C_padded]
            for (k, &i) in idx[c_axis + 1..].iter().enumerate() {
                offset += i * strides[c_axis + k];
            }
            offset += c * strides[rank - 1];
        } else {
            // physical: [lead…, C/v, spatial…, v]
            offset += (c / v) * strides[c_axis];
            for (k, &i) in idx[c_axis + 1..].iter().enumerate() {
                offset += i * strides[c_axis + 1 + k];
            }
            offset += c % v;
        }
        out.push(offset);
        for axis in (0..rank).rev() {
            idx[axis] += 1;
            if idx[axis] < logical[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
    out
}

/// Element strides of a row-major tensor of `dims`.
pub(crate) fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

fn copy_elements(src: &TensorData, dst: &mut TensorData, src_index: &[usize], dst_index: &[usize]) {
    macro_rules! same_type {
        ($($variant:ident),*) => {
            match (src, dst) {
                $((TensorData::$variant(s), TensorData::$variant(d)) => {
                    for (&si, &di) in src_index.iter().zip(dst_index) {
                        d[di] = s[si];
                    }
                })*
                _ => unreachable!("reformat allocates its output with the input's element type"),
            }
        };
    }
    same_type!(F32, F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool);
}
