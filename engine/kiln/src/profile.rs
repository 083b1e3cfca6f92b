//! Optimization profiles (seed §6.8 explicit batch, TensorRT's `IOptimizationProfile`):
//! for every network input with dynamic dims, the smallest, the tuned-for and the largest
//! shape an engine accepts; for shape tensors (integer inputs whose values are shapes), the
//! smallest, tuned-for and largest values.
//!
//! A network whose inputs are all fixed needs no profile. A network with dynamic inputs and
//! no profile is built anyway (TensorRT refuses it): such an engine accepts any input shape
//! that agrees with the declared fixed dims, and tensors whose size depends on a dynamic dim
//! are left out of the planned arena (see [`crate::memory_plan`]). Give a profile to get
//! run-time bounds checks and a complete memory plan.

use crate::ir::dtype::DataType;
use crate::ir::network::Network;
use crate::ir::shape::Dim;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Min / opt / max of one input: dims of a tensor, or values of a shape tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range<T> {
    pub min: Vec<T>,
    pub opt: Vec<T>,
    pub max: Vec<T>,
}

impl<T: Copy> Range<T> {
    pub fn new(min: &[T], opt: &[T], max: &[T]) -> Range<T> {
        Range { min: min.to_vec(), opt: opt.to_vec(), max: max.to_vec() }
    }
}

/// One optimization profile: dims ranges per input name, value ranges per shape tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptimizationProfile {
    shapes: BTreeMap<String, Range<usize>>,
    values: BTreeMap<String, Range<i64>>,
}

impl OptimizationProfile {
    pub fn new() -> OptimizationProfile {
        OptimizationProfile::default()
    }

    /// Sets the min / opt / max dims of input `name` (replacing earlier ones); checked by
    /// the builder.
    pub fn set_dimensions(&mut self, name: &str, min: &[usize], opt: &[usize], max: &[usize]) -> &mut Self {
        self.shapes.insert(name.to_string(), Range::new(min, opt, max));
        self
    }

    /// Sets the min / opt / max values of shape-tensor input `name`.
    pub fn set_shape_values(&mut self, name: &str, min: &[i64], opt: &[i64], max: &[i64]) -> &mut Self {
        self.values.insert(name.to_string(), Range::new(min, opt, max));
        self
    }

    pub fn dimensions(&self, name: &str) -> Option<&Range<usize>> {
        self.shapes.get(name)
    }

    pub fn shape_values(&self, name: &str) -> Option<&Range<i64>> {
        self.values.get(name)
    }

    /// Inputs with dims ranges, by name.
    pub fn dimension_ranges(&self) -> impl Iterator<Item = (&str, &Range<usize>)> {
        self.shapes.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Shape-tensor inputs with value ranges, by name.
    pub fn value_ranges(&self) -> impl Iterator<Item = (&str, &Range<i64>)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// Why a profile does not fit its network. `profile` is the profile's index in the config.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProfileError {
    #[error("profile {profile}: `{input}` is not an input of the network (inputs: {inputs})")]
    UnknownInput { profile: usize, input: String, inputs: String },
    #[error("profile {profile}: input `{input}` has dynamic dims {shape} but the profile gives no dimensions for it")]
    MissingInput { profile: usize, input: String, shape: String },
    #[error("profile {profile}: input `{input}` has rank {rank} but its {which} dims {dims:?} have {}", dims.len())]
    Rank { profile: usize, input: String, rank: usize, which: &'static str, dims: Vec<usize> },
    #[error("profile {profile}: input `{input}` axis {axis}: min {min} ≤ opt {opt} ≤ max {max} does not hold")]
    Order { profile: usize, input: String, axis: usize, min: i64, opt: i64, max: i64 },
    #[error("profile {profile}: input `{input}` axis {axis} is fixed at {fixed} but the profile gives min {min}, opt {opt}, max {max}")]
    FixedDim { profile: usize, input: String, axis: usize, fixed: usize, min: usize, opt: usize, max: usize },
    /// `detail` names both inputs and their min/opt/max.
    #[error("profile {profile}: dim `{dim}` is shared by several inputs but their ranges differ: {detail}")]
    NamedDimConflict { profile: usize, dim: String, detail: String },
    #[error("profile {profile}: shape tensor `{input}` must be an i32 or i64 input of rank 0 or 1 with a fixed length, not {dtype}{shape}")]
    NotAShapeTensor { profile: usize, input: String, dtype: DataType, shape: String },
    #[error("profile {profile}: shape tensor `{input}` holds {len} values but its {which} values {values:?} have {}", values.len())]
    ValueCount { profile: usize, input: String, len: usize, which: &'static str, values: Vec<i64> },
    #[error("profile {profile}: shape tensor `{input}` does not have value ranges here but has them in profile 0 (every profile must cover the same shape tensors)")]
    ShapeTensorCoverage { profile: usize, input: String },
}

/// Checks every profile against the network: every input named exists, every input with a
/// dynamic dim is covered, ranks match, fixed dims are equal, min ≤ opt ≤ max per axis, a
/// named dim shared by several inputs has one range, and shape-tensor values fit their input.
pub fn validate_profiles(network: &Network, profiles: &[OptimizationProfile]) -> Result<(), ProfileError> {
    let input_names: Vec<&str> = network.inputs().iter().map(|&t| network.tensor(t).name.as_str()).collect();
    for (p, profile) in profiles.iter().enumerate() {
        let unknown =
            profile.shapes.keys().chain(profile.values.keys()).find(|name| !input_names.contains(&name.as_str()));
        if let Some(name) = unknown {
            return Err(ProfileError::UnknownInput { profile: p, input: name.clone(), inputs: input_names.join(", ") });
        }
        let mut named: HashMap<&str, (&str, [usize; 3])> = HashMap::new();
        for &t in network.inputs() {
            let desc = network.tensor(t);
            let Some(range) = profile.shapes.get(&desc.name) else {
                if desc.shape.dims().iter().any(|d| !d.is_fixed()) {
                    return Err(ProfileError::MissingInput {
                        profile: p,
                        input: desc.name.clone(),
                        shape: desc.shape.text(),
                    });
                }
                continue;
            };
            for (which, dims) in [("min", &range.min), ("opt", &range.opt), ("max", &range.max)] {
                if dims.len() != desc.shape.rank() {
                    return Err(ProfileError::Rank {
                        profile: p,
                        input: desc.name.clone(),
                        rank: desc.shape.rank(),
                        which,
                        dims: dims.clone(),
                    });
                }
            }
            for (axis, dim) in desc.shape.dims().iter().enumerate() {
                let (min, opt, max) = (range.min[axis], range.opt[axis], range.max[axis]);
                if let Dim::Fixed(fixed) = *dim {
                    if (min, opt, max) != (fixed, fixed, fixed) {
                        return Err(ProfileError::FixedDim {
                            profile: p,
                            input: desc.name.clone(),
                            axis,
                            fixed,
                            min,
                            opt,
                            max,
                        });
                    }
                }
                if !(min <= opt && opt <= max) {
                    return Err(ProfileError::Order {
                        profile: p,
                        input: desc.name.clone(),
                        axis,
                        min: min as i64,
                        opt: opt as i64,
                        max: max as i64,
                    });
                }
                if let Dim::Named(sym) = dim {
                    if let Some((first, r)) = named.insert(sym.as_str(), (desc.name.as_str(), [min, opt, max])) {
                        if r != [min, opt, max] {
                            return Err(ProfileError::NamedDimConflict {
                                profile: p,
                                dim: sym.clone(),
                                detail: format!("`{first}` has {r:?}, `{}` has {:?}", desc.name, [min, opt, max]),
                            });
                        }
                    }
                }
            }
        }
        for (name, range) in &profile.values {
            validate_value_range(network, p, name, range)?;
        }
        if let Some(first) = profiles.first() {
            if let Some(name) = first.values.keys().find(|k| !profile.values.contains_key(*k)) {
                return Err(ProfileError::ShapeTensorCoverage { profile: p, input: name.clone() });
            }
        }
    }
    Ok(())
}

fn validate_value_range(network: &Network, p: usize, name: &str, range: &Range<i64>) -> Result<(), ProfileError> {
    let t = network.find_tensor(name).expect("checked to be an input");
    let desc = network.tensor(t);
    let len = match desc.shape.dims() {
        [] => Some(1),
        [Dim::Fixed(n)] => Some(*n),
        _ => None,
    };
    let len = match len {
        Some(len) if matches!(desc.dtype, DataType::I32 | DataType::I64) => len,
        _ => {
            return Err(ProfileError::NotAShapeTensor {
                profile: p,
                input: name.to_string(),
                dtype: desc.dtype,
                shape: desc.shape.text(),
            })
        }
    };
    for (which, values) in [("min", &range.min), ("opt", &range.opt), ("max", &range.max)] {
        if values.len() != len {
            return Err(ProfileError::ValueCount {
                profile: p,
                input: name.to_string(),
                len,
                which,
                values: values.clone(),
            });
        }
    }
    for axis in 0..len {
        let (min, opt, max) = (range.min[axis], range.opt[axis], range.max[axis]);
        if !(min <= opt && opt <= max) {
            return Err(ProfileError::Order { profile: p, input: name.to_string(), axis, min, opt, max });
        }
    }
    Ok(())
}
