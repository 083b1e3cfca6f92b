//! Memory layouts of tensors at the network boundary (seed §6.6).

use serde::{Deserialize, Serialize};

/// A tensor memory layout. Inside an engine every tensor is LINEAR unless a backend chooses
/// otherwise; at the boundary the user may ask for a vectorized layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TensorFormat {
    /// Row-major, as the dims say.
    #[default]
    Linear,
    Chw2,
    Chw4,
    Hwc8,
    Chw16,
    Chw32,
    Dhwc8,
    Cdhw32,
    Hwc,
    Hwc16,
}

impl TensorFormat {
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
}
