//! The WGSL sources (embedded from `/shaders`) and every instantiation the backend
//! compiles: a kernel is `common.wgsl` + an instantiation prelude (type aliases and op
//! functions from [`crate::wgsl`]) + the kernel's body. [`generic_instantiations`] lists the
//! instantiations of the generic kernels; `ops::all_instantiations` adds each launcher's own,
//! so a test can validate every one with naga.

use crate::wgsl::{self, Storage, ENABLE_F16};
use kiln::{ActivationKind, DataType, E8M0Rounding, ElementwiseOp, ReduceOp, UnaryOp};

const COMMON: &str = include_str!("../../../shaders/common.wgsl");


/// The kernel bodies, by name.
pub const BODIES: &[(&str, &str)] = &[
    ("binary", include_str!("../../../shaders/binary.wgsl")),
    ("unary", include_str!("../../../shaders/unary.wgsl")),
    ("select", include_str!("../../../shaders/select.wgsl")),
    ("copy", include_str!("../../../shaders/copy.wgsl")),
    ("fill", include_str!("../../../shaders/fill.wgsl")),
    ("narrow", include_str!("../../../shaders/narrow.wgsl")),
    ("widen_f16", include_str!("../../../shaders/widen_f16.wgsl")),
    ("narrow_f16", include_str!("../../../shaders/narrow_f16.wgsl")),
    ("matmul", include_str!("../../../shaders/matmul.wgsl")),
    ("matmul_wide", include_str!("../../../shaders/matmul_wide.wgsl")),
    ("conv", include_str!("../../../shaders/conv.wgsl")),
    ("requantize", include_str!("../../../shaders/requantize.wgsl")),
    ("lookup_levels", include_str!("../../../shaders/lookup_levels.wgsl")),
    ("pack_i8x4", include_str!("../../../shaders/pack_i8x4.wgsl")),
    ("dot_i8x4", include_str!("../../../shaders/dot_i8x4.wgsl")),
    ("deconv", include_str!("../../../shaders/deconv.wgsl")),
    ("pool", include_str!("../../../shaders/pool.wgsl")),
    ("reduce", include_str!("../../../shaders/reduce.wgsl")),
    ("softmax", include_str!("../../../shaders/softmax.wgsl")),
    ("norm", include_str!("../../../shaders/norm.wgsl")),
    ("gather", include_str!("../../../shaders/gather.wgsl")),
    ("gather_elements", include_str!("../../../shaders/gather_elements.wgsl")),
    ("topk", include_str!("../../../shaders/topk.wgsl")),
    ("cumulative", include_str!("../../../shaders/cumulative.wgsl")),
    ("lrn", include_str!("../../../shaders/lrn.wgsl")),
    ("scatter_elements", include_str!("../../../shaders/scatter_elements.wgsl")),
    ("scatter_nd", include_str!("../../../shaders/scatter_nd.wgsl")),
    ("gather_nd", include_str!("../../../shaders/gather_nd.wgsl")),
    ("one_hot", include_str!("../../../shaders/one_hot.wgsl")),
    ("pad_mode", include_str!("../../../shaders/pad_mode.wgsl")),
    ("einsum", include_str!("../../../shaders/einsum.wgsl")),
    ("resize_axis", include_str!("../../../shaders/resize_axis.wgsl")),
    ("resize_mask", include_str!("../../../shaders/resize_mask.wgsl")),
    ("grid_sample", include_str!("../../../shaders/grid_sample.wgsl")),
    ("quantize", include_str!("../../../shaders/quantize.wgsl")),
    ("dequantize", include_str!("../../../shaders/dequantize.wgsl")),
    ("determinant", include_str!("../../../shaders/determinant.wgsl")),
    ("col2im", include_str!("../../../shaders/col2im.wgsl")),
    ("dft", include_str!("../../../shaders/dft.wgsl")),
    ("roi_align", include_str!("../../../shaders/roi_align.wgsl")),
];

/// `source` with every read-only storage binding made read-write. Tensors of one execution
/// share arena buffers (see `crate::arena`), and wgpu refuses a buffer bound read-only and
/// read-write in the same dispatch; read-write throughout keeps one usage per buffer. (A
/// kernel never writes what it reads: its inputs' ranges are disjoint from its outputs'.)
pub fn tensor_bindings_read_write(source: &str) -> String {
    source.replace("var<storage, read>", "var<storage, read_write>")
}


/// One compilable kernel: its cache key and the parts of its source.
#[derive(Clone, Debug)]
pub struct Instance {
    pub key: String,
    pub body: &'static str,
    pub prelude: String,
}

impl Instance {
    fn new(body: &'static str, key: String, prelude: String) -> Instance {
        let body = BODIES.iter().find(|(n, _)| *n == body).map(|(_, b)| *b).unwrap_or("");
        Instance { key, body, prelude }
    }

    /// A kernel without instantiation parameters (`alias T` only for matmul).
    pub fn plain(body: &'static str) -> Instance {
        Instance::new(body, body.to_string(), String::new())
    }

    pub fn source(&self) -> String {
        let (directive, prelude) = match self.prelude.strip_prefix(ENABLE_F16) {
            Some(rest) => (ENABLE_F16, rest),
            None => ("", self.prelude.as_str()),
        };
        tensor_bindings_read_write(&format!("{directive}{COMMON}\n{prelude}\n{}", self.body))
    }

    /// Whether the kernel needs the SHADER_F16 feature (`enable f16;`).
    pub fn needs_f16(&self) -> bool {
        self.prelude.starts_with(ENABLE_F16)
    }

    /// Softmax on f32 words, or (`halves`) on f16 halves computing in f32.
    pub fn softmax(halves: bool) -> Instance {
        Instance::float_io("softmax", halves)
    }

    /// (RMS) normalization on f32 words, or (`halves`) on f16 halves computing in f32.
    pub fn norm(halves: bool) -> Instance {
        Instance::float_io("norm", halves)
    }

    /// A float kernel whose bindings are `AS` / `OS` (see `wgsl::half_io`).
    fn float_io(body: &'static str, halves: bool) -> Instance {
        let words = wgsl::aliases(Storage::F32, Storage::F32);
        match halves.then(|| wgsl::half_io(&words, Storage::F32)).flatten() {
            Some(prelude) => Instance::new(body, format!("{body}/f16"), prelude),
            None => Instance::new(body, body.to_string(), words),
        }
    }

    /// Whether a pointwise kernel stores its output as f16 halves (see `wgsl::half_io`).
    pub fn writes_halves(&self) -> bool {
        self.needs_f16() && self.prelude.contains("alias OS = f16;")
    }

    /// f16 halves → f32 words, or (`to_halves`) f32 words → halves rounded to nearest even.
    pub fn f16_conversion(to_halves: bool) -> Instance {
        let body = if to_halves { "narrow_f16" } else { "widen_f16" };
        Instance::new(body, body.to_string(), String::new())
    }

    pub fn binary(op: ElementwiseOp, s: Storage) -> Option<(Storage, Instance)> {
        let (o, prelude) = wgsl::binary(op, s)?;
        Some((o, Instance::new("binary", format!("binary/{op:?}/{}", s.wgsl()), prelude)))
    }

    /// The f16 instantiation of [`Instance::binary`] on f32: halves in, halves out (bool
    /// words for comparisons), computing in f32.
    pub fn binary_f16(op: ElementwiseOp) -> Option<(Storage, Instance)> {
        let (o, prelude) = wgsl::binary(op, Storage::F32)?;
        Some((o, Instance::new("binary", format!("binary/{op:?}/f16"), wgsl::half_io(&prelude, o)?)))
    }

    /// The f16 instantiation of [`Instance::unary`] on f32 (see [`Instance::binary_f16`]).
    pub fn unary_f16(op: UnaryOp) -> Option<(Storage, Instance)> {
        let (o, prelude) = wgsl::unary(op, Storage::F32)?;
        Some((o, Instance::new("unary", format!("unary/{op:?}/f16"), wgsl::half_io(&prelude, o)?)))
    }

    /// The f16 instantiation of [`Instance::activation`] on f32.
    pub fn activation_f16(kind: &ActivationKind) -> Option<(Instance, [f32; 3])> {
        let (f32_kernel, p) = Instance::activation(kind, Storage::F32)?;
        let prelude = wgsl::half_io(&f32_kernel.prelude, Storage::F32)?;
        let key = f32_kernel.key.replace("/f32", "/f16");
        Some((Instance::new("unary", key, prelude), p))
    }

    pub fn unary(op: UnaryOp, s: Storage) -> Option<(Storage, Instance)> {
        let (o, prelude) = wgsl::unary(op, s)?;
        Some((o, Instance::new("unary", format!("unary/{op:?}/{}", s.wgsl()), prelude)))
    }

    /// Activation parameters are runtime values (params), so one kernel serves every alpha.
    pub fn activation(kind: &ActivationKind, s: Storage) -> Option<(Instance, [f32; 3])> {
        let (prelude, p) = wgsl::activation(kind, s)?;
        let name = format!("{kind:?}");
        let name = name.split([' ', '{']).next().unwrap_or_default();
        Some((Instance::new("unary", format!("activation/{name}/{}", s.wgsl()), prelude), p))
    }

    /// A Cast (or CastNarrow with `mode`) from `from` to `to`: one kernel per source
    /// storage class (float8 / float4 sources canonicalise NaN), target type and mode.
    pub fn cast(from: DataType, to: DataType, mode: wgsl::CastMode) -> Option<(Storage, Instance, [f32; 3])> {
        let mode = if to.is_narrow_float() { mode } else { wgsl::CastMode::default() };
        let (o, prelude, p) = wgsl::cast(from, to, mode)?;
        let a = Storage::of(from)?.wgsl();
        let source = if from.is_narrow_float() { "f8" } else { a };
        // The body depends on the target type itself (saturation bounds of the 32- and
        // 64-bit integers, rounding of the narrow types), not only on its storage.
        let target = to.name();
        let mode = if mode == wgsl::CastMode::default() {
            String::new()
        } else {
            format!("/{}/{:?}", if mode.saturate { "sat" } else { "nosat" }, mode.e8m0_rounding)
        };
        Some((o, Instance::new("unary", format!("cast/{source}/{target}{mode}"), prelude), p))
    }

    pub fn reduce(op: ReduceOp, s: Storage) -> Option<Instance> {
        let prelude = wgsl::reduce(op, s)?;
        Some(Instance::new("reduce", format!("reduce/{op:?}/{}", s.wgsl()), prelude))
    }

    pub fn matmul(s: Storage) -> Instance {
        Instance::new("matmul", format!("matmul/{}", s.wgsl()), format!("alias T = {};\n", s.wgsl()))
    }

    /// The direct convolution on f32 words, or on i32 (integer layers' exact sums).
    pub fn conv(s: Storage) -> Instance {
        Instance::new("conv", format!("conv/{}", s.wgsl()), format!("alias T = {};\n", s.wgsl()))
    }
}

const ELEMENTWISE_OPS: [ElementwiseOp; 23] = {
    use ElementwiseOp::*;
    [
        Sum,
        Sub,
        Prod,
        Div,
        FloorDiv,
        Mod,
        Fmod,
        Pow,
        Max,
        Min,
        Equal,
        Greater,
        Less,
        GreaterOrEqual,
        LessOrEqual,
        And,
        Or,
        Xor,
        BitAnd,
        BitOr,
        BitXor,
        ShiftLeft,
        ShiftRight,
    ]
};

const UNARY_OPS: [UnaryOp; 26] = {
    use UnaryOp::*;
    [
        Exp,
        Log,
        Sqrt,
        Recip,
        Abs,
        Neg,
        Sin,
        Cos,
        Tan,
        Sinh,
        Cosh,
        Asin,
        Acos,
        Atan,
        Asinh,
        Acosh,
        Atanh,
        Ceil,
        Floor,
        Round,
        Erf,
        Not,
        Sign,
        IsNan,
        IsInf { detect_positive: true, detect_negative: false },
        IsInf { detect_positive: false, detect_negative: true },
    ]
};

const ACTIVATIONS: [ActivationKind; 18] = {
    use ActivationKind::*;
    [
        Relu,
        Sigmoid,
        Tanh,
        LeakyRelu { alpha: 0.1 },
        Elu { alpha: 1.0 },
        Selu { alpha: 1.6, gamma: 1.0 },
        Softsign,
        Softplus,
        Clip { min: 0.0, max: 6.0 },
        HardSigmoid { alpha: 0.2, beta: 0.5 },
        HardSwish,
        ScaledTanh { alpha: 1.0, beta: 1.0 },
        ThresholdedRelu { alpha: 1.0 },
        GeluErf,
        GeluTanh,
        Celu { alpha: 1.0 },
        Mish,
        Swish,
    ]
};

const REDUCE_OPS: [ReduceOp; 10] = {
    use ReduceOp::*;
    [Sum, Prod, Max, Min, Mean, L1, L2, LogSum, LogSumExp, SumSquare]
};

/// Every instantiation of the generic kernels (pointwise, reductions, casts, products, and
/// the kernels with a single instantiation), for validation.
pub fn generic_instantiations() -> Vec<Instance> {
    let mut all: Vec<Instance> = [
        "matmul_wide",
        "select",
        "copy",
        "fill",
        "narrow",
        "requantize",
        "lookup_levels",
        "pack_i8x4",
        "dot_i8x4",
        "deconv",
        "pool",
        "gather",
        "gather_elements",
        "resize_axis",
        "resize_mask",
        "grid_sample",
        "quantize",
        "dequantize",
        "determinant",
        "col2im",
        "dft",
        "roi_align",
    ]
    .into_iter()
    .map(Instance::plain)
    .collect();
    all.extend([false, true].map(Instance::f16_conversion));
    all.extend([false, true].map(Instance::softmax));
    all.extend([false, true].map(Instance::norm));
    all.extend(ELEMENTWISE_OPS.iter().filter_map(|&op| Instance::binary_f16(op)).map(|(_, i)| i));
    all.extend(UNARY_OPS.iter().filter_map(|&op| Instance::unary_f16(op)).map(|(_, i)| i));
    all.extend(ACTIVATIONS.iter().filter_map(Instance::activation_f16).map(|(i, _)| i));
    all.extend([Storage::F32, Storage::I32].map(Instance::conv));
    for s in Storage::ALL {
        all.push(Instance::matmul(s));
        all.extend(ELEMENTWISE_OPS.iter().filter_map(|&op| Instance::binary(op, s)).map(|(_, i)| i));
        all.extend(UNARY_OPS.iter().filter_map(|&op| Instance::unary(op, s)).map(|(_, i)| i));
        all.extend(ACTIVATIONS.iter().filter_map(|k| Instance::activation(k, s)).map(|(i, _)| i));
        all.extend(REDUCE_OPS.iter().filter_map(|&op| Instance::reduce(op, s)));
    }
    // One source per cast kernel class: each storage, and a float8 source.
    for from in [DataType::F32, DataType::I32, DataType::U32, DataType::F8E4M3FN] {
        for to in DataType::ALL {
            all.extend(Instance::cast(from, to, wgsl::CastMode::default()).map(|(_, i, _)| i));
        }
    }
    for to in DataType::ALL.into_iter().filter(|t| t.is_narrow_float()) {
        for e8m0_rounding in [E8M0Rounding::Up, E8M0Rounding::Down, E8M0Rounding::Nearest] {
            let mode = wgsl::CastMode { saturate: false, e8m0_rounding };
            all.extend(Instance::cast(DataType::F32, to, mode).map(|(_, i, _)| i));
        }
    }
    all
}
