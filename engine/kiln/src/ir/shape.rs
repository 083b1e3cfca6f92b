//! Tensor dimensions: fixed, named (symbolic) or unknown until run time.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One dimension of a tensor shape as known at build time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dim {
    /// A length fixed at build time (0 is legal: empty tensors).
    Fixed(usize),
    /// A dynamic length with a name; two dims with the same name are equal at run time.
    Named(String),
    /// A dynamic length computed at run time (e.g. from a shape tensor).
    Unknown,
}

impl Dim {
    pub fn fixed(&self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(*n),
            _ => None,
        }
    }

    pub fn is_fixed(&self) -> bool {
        matches!(self, Dim::Fixed(_))
    }

    /// Whether two dims are provably equal at build time.
    pub fn same_as(&self, other: &Dim) -> bool {
        match (self, other) {
            (Dim::Fixed(a), Dim::Fixed(b)) => a == b,
            (Dim::Named(a), Dim::Named(b)) => a == b,
            _ => false,
        }
    }

    /// Whether two dims are provably different at build time.
    pub fn differs_from(&self, other: &Dim) -> bool {
        matches!((self, other), (Dim::Fixed(a), Dim::Fixed(b)) if a != b)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Named(s) => write!(f, "{s}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Fixed(n)
    }
}

/// A tensor shape: a list of dims (the rank is always known).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn fixed(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Fixed(d)).collect())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// All dims as numbers when every one is fixed.
    pub fn as_fixed(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::fixed).collect()
    }

    /// Element count when every dim is fixed (`None` also when the count overflows).
    pub fn volume(&self) -> Option<usize> {
        self.as_fixed().and_then(|d| d.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n)))
    }

    /// TensorRT-style text: `[1,3,224,224]`, `[N,3,?,?]`.
    pub fn text(&self) -> String {
        let inner: Vec<String> = self.0.iter().map(|d| d.to_string()).collect();
        format!("[{}]", inner.join(","))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Shape {
        Shape::fixed(dims)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Shape {
        Shape::fixed(&dims)
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape(dims)
    }
}

/// Normalizes a possibly negative axis against `rank` (ONNX/TensorRT convention).
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// One element of a small integer tensor (a shape tensor) as known at build time, when not
/// every element is a number: exporters compute reshape dims from `Shape` of tensors with
/// dynamic dims (`Shape → Gather → Concat → Reshape`), and the dims that are fixed stay
/// known through that arithmetic (TensorRT's shape tensors keep their length likewise).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SymInt {
    Known(i64),
    /// The run-time length of the dynamic dim of that name.
    Named(String),
    /// Computed at run time.
    Unknown,
}

impl SymInt {
    /// The element a dim of a tensor's shape gives (`Shape`'s output).
    pub fn of_dim(dim: &Dim) -> SymInt {
        match dim {
            Dim::Fixed(n) => i64::try_from(*n).map_or(SymInt::Unknown, SymInt::Known),
            Dim::Named(name) => SymInt::Named(name.clone()),
            Dim::Unknown => SymInt::Unknown,
        }
    }

    pub fn known(&self) -> Option<i64> {
        match self {
            SymInt::Known(v) => Some(*v),
            _ => None,
        }
    }

    /// The dim this element describes when it is used as a length (a negative number is
    /// no length: `None`).
    pub fn as_dim(&self) -> Option<Dim> {
        Some(match self {
            SymInt::Known(v) => Dim::Fixed(usize::try_from(*v).ok()?),
            SymInt::Named(name) => Dim::Named(name.clone()),
            SymInt::Unknown => Dim::Unknown,
        })
    }
}

impl fmt::Display for SymInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymInt::Known(v) => write!(f, "{v}"),
            SymInt::Named(name) => f.write_str(name),
            SymInt::Unknown => f.write_str("?"),
        }
    }
}

/// Shape-tensor elements as `[a, b, c]`, as `{:?}` prints a list of numbers.
pub fn sym_list(elements: &[SymInt]) -> String {
    let parts: Vec<String> = elements.iter().map(SymInt::to_string).collect();
    format!("[{}]", parts.join(", "))
}
