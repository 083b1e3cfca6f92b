//! WGSL snippets of the pointwise and reduction operators: the `op` / `init` / `step` /
//! `finish` functions and type aliases that instantiate the generic kernels of
//! `shaders/binary.wgsl`, `unary.wgsl` and `reduce.wgsl`.

use kiln::{ActivationKind, DataType, E8M0Rounding, ElementwiseOp, ReduceOp, UnaryOp};

/// WGSL functions rounding f32 to the float8 / float4 types bit-exactly as the cpu backend
/// (`round_to_<type>(x: f32) -> f32` per type, `round_to_<type>_mode` with the Cast
/// modes); a prelude may include it (it needs `common.wgsl`, which every kernel has).
pub const MINIFLOAT: &str = include_str!("../../../shaders/minifloat.wgsl");

/// The directive of kernels that bind `array<f16>` (needs SHADER_F16); a prelude starting
/// with it has it moved to the head of the module, where WGSL requires directives.
pub const ENABLE_F16: &str = "enable f16;\n";

/// How a logical type is stored on the device: every element is one 32-bit word (WGSL
/// has no 64-bit or 8-bit storage types), except f16 where the adapter has SHADER_F16,
/// stored as halves (`value::Packing::Half`) and widened to f32 words for kernels without
/// an f16 instantiation; this is the storage those kernels see. Narrower types are widened (bool is 0 / 1; the
/// float8 / float4 types hold their decoded f32 value, see `shaders/minifloat.wgsl`); the
/// 64-bit types are narrowed: f64 is stored and computed as f32, i64 / u64 as i32 / u32
/// when every value fits (refused on upload otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    F32,
    I32,
    U32,
}

impl Storage {
    /// The storage of `dtype`, or `None` for types the device cannot hold (strings).
    pub fn of(dtype: DataType) -> Option<Storage> {
        use DataType as D;
        match dtype {
            D::F32 | D::F16 | D::BF16 | D::F64 => Some(Storage::F32),
            D::F8E4M3FN | D::F8E4M3FNUZ | D::F8E5M2 | D::F8E5M2FNUZ | D::F8E8M0 | D::F4E2M1 => Some(Storage::F32),
            D::I8 | D::I16 | D::I32 | D::I64 | D::I4 | D::I2 => Some(Storage::I32),
            D::U8 | D::U16 | D::U32 | D::U64 | D::Bool | D::U4 | D::U2 => Some(Storage::U32),
            #[allow(unreachable_patterns)] // types other helpers may add
            _ => None,
        }
    }

    pub fn wgsl(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::I32 => "i32",
            Storage::U32 => "u32",
        }
    }

    pub const ALL: [Storage; 3] = [Storage::F32, Storage::I32, Storage::U32];
}

/// The type aliases of an instantiation computing on `a` into `o`, and how the pointwise
/// kernels (`binary.wgsl`, `unary.wgsl`) load and store their tensors: `AS` / `OS` are the
/// element types of the bindings, `load_a` / `store_o` convert (identities on words).
pub fn aliases(a: Storage, o: Storage) -> String {
    io_aliases(a, o, false, false)
}

fn io_aliases(a: Storage, o: Storage, half_in: bool, half_out: bool) -> String {
    let (a, o) = (a.wgsl(), o.wgsl());
    let (a_stored, load) = if half_in { ("f16", "f32(v)") } else { (a, "v") };
    // Rounded to nearest even on the bits first: exact whatever rounding the driver's
    // f32 -> f16 conversion does (round_f16 is in common.wgsl).
    let (o_stored, store) = if half_out { ("f16", "f16(bitcast<f32>(round_f16(bitcast<u32>(v))))") } else { (o, "v") };
    format!(
        "alias A = {a};\nalias O = {o};\nalias AS = {a_stored};\nalias OS = {o_stored};\n\
         fn load_a(v: AS) -> A {{ return {load}; }}\nfn store_o(v: O) -> OS {{ return {store}; }}\n"
    )
}

/// The f16 instantiation of a pointwise prelude made for f32 inputs and `o` outputs: its
/// tensors bound as `array<f16>` (f32 outputs as f16 too), computing in f32 inside.
/// `None` for a prelude of other storages.
pub fn half_io(prelude: &str, o: Storage) -> Option<String> {
    let rest = prelude.strip_prefix(&aliases(Storage::F32, o))?;
    let head = io_aliases(Storage::F32, o, true, o == Storage::F32);
    Some(format!("{}{head}{rest}", ENABLE_F16))
}

/// Shared helpers some snippets call: sign-correct pow, erf, stable tanh.
const MATH: &str = r#"
fn k_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    if (a < 0.0) {
        if (b == floor(b)) {
            let m = pow(-a, b);
            return select(m, -m, (b % 2.0) != 0.0);
        }
        return bitcast<f32>(0x7fc00000u);
    }
    if (a == 0.0) { return select(0.0, pos_inf(), b < 0.0); }
    return pow(a, b);
}
fn k_erf(x: f32) -> f32 {
    let z = abs(x);
    if (z < 0.5) {
        let t = x * x;
        return x * (1.1283791671 + t * (-0.3761263890 + t * (0.1128379167 + t * (-0.0268661706 + t * (0.0052239776 - t * 0.0008548327)))));
    }
    // Abramowitz & Stegun 7.1.26 refined: |error| < 1.5e-7.
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-z * z);
    return select(y, -y, x < 0.0);
}
fn k_tanh(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, x < 0.0);
}
fn k_is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > F32_INF;
}
fn k_ipow(a: i32, b: i32) -> i32 {
    if (b < 0) {
        // Integer powers with negative exponents truncate toward zero.
        if (a == 1) { return 1; }
        if (a == -1) { return select(1, -1, (b & 1) != 0); }
        return 0;
    }
    var r = 1;
    var base = a;
    var e = u32(b);
    while (e > 0u) {
        if ((e & 1u) != 0u) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
"#;

/// The `op(a, b)` of a binary elementwise operator on `s`, with its output storage, or
/// `None` when the operator is not defined on that storage.
pub fn binary(op: ElementwiseOp, s: Storage) -> Option<(Storage, String)> {
    use ElementwiseOp as E;
    use Storage::*;
    let cmp = |e: &str| Some((U32, format!("select(0u, 1u, {e})")));
    let same = |e: String| Some((s, e));
    let expr = match (op, s) {
        (E::Sum, _) => same("a + b".into()),
        (E::Sub, _) => same("a - b".into()),
        (E::Prod, _) => same("a * b".into()),
        (E::Div, F32) => same("a / b".into()),
        (E::Div, _) => same("select(a / b, A(0), b == A(0))".into()),
        (E::FloorDiv, F32) => same("floor(a / b)".into()),
        (E::FloorDiv, I32) => {
            same("select(a / b - select(0, 1, (a % b != 0) && ((a < 0) != (b < 0))), 0, b == 0)".into())
        }
        (E::FloorDiv, U32) => same("select(a / b, 0u, b == 0u)".into()),
        (E::Mod, F32) => same("select(a % b + b, a % b, (a % b == 0.0) || ((a % b < 0.0) == (b < 0.0)))".into()),
        (E::Mod, I32) => {
            same("select(select(a % b + b, a % b, (a % b == 0) || ((a % b < 0) == (b < 0))), 0, b == 0)".into())
        }
        (E::Mod | E::Fmod, U32) => same("select(a % b, 0u, b == 0u)".into()),
        (E::Fmod, F32) => same("a % b".into()),
        (E::Fmod, I32) => same("select(a % b, 0, b == 0)".into()),
        (E::Pow, F32) => same("k_pow(a, b)".into()),
        (E::Pow, I32) => same("k_ipow(a, b)".into()),
        (E::Pow, U32) => same("u32(k_ipow(i32(a), i32(b)))".into()),
        (E::Max, F32) => same("select(max(a, b), a + b, k_is_nan(a) || k_is_nan(b))".into()),
        (E::Min, F32) => same("select(min(a, b), a + b, k_is_nan(a) || k_is_nan(b))".into()),
        (E::Max, _) => same("max(a, b)".into()),
        (E::Min, _) => same("min(a, b)".into()),
        (E::Equal, _) => cmp("a == b"),
        (E::Greater, _) => cmp("a > b"),
        (E::Less, _) => cmp("a < b"),
        (E::GreaterOrEqual, _) => cmp("a >= b"),
        (E::LessOrEqual, _) => cmp("a <= b"),
        (E::And, U32) => same("a & b".into()),
        (E::Or, U32) => same("a | b".into()),
        (E::Xor, U32) => same("a ^ b".into()),
        (E::BitAnd, I32 | U32) => same("a & b".into()),
        (E::BitOr, I32 | U32) => same("a | b".into()),
        (E::BitXor, I32 | U32) => same("a ^ b".into()),
        (E::ShiftLeft, I32 | U32) => same("select(A(0), a << u32(b), u32(b) < 32u)".into()),
        (E::ShiftRight, U32) => same("select(0u, a >> b, b < 32u)".into()),
        (E::ShiftRight, I32) => same("select(0, a >> u32(b), u32(b) < 32u)".into()),
        _ => return None,
    }?;
    let (o, body) = expr;
    Some((o, format!("{}{MATH}\nfn op(a: A, b: A) -> O {{ return {body}; }}\n", aliases(s, o))))
}

/// The `op(x)` of a unary operator on `s` with its output storage, or `None`.
pub fn unary(op: UnaryOp, s: Storage) -> Option<(Storage, String)> {
    use Storage::*;
    use UnaryOp as U;
    let float = |e: &str| if s == F32 { Some((F32, e.to_string())) } else { None };
    let (o, body) = match (op, s) {
        (U::Exp, _) => float("exp(x)")?,
        (U::Log, _) => float("log(x)")?,
        (U::Sqrt, _) => float("sqrt(x)")?,
        (U::Recip, _) => float("1.0 / x")?,
        (U::Abs, U32) => (U32, "x".into()),
        (U::Abs, _) => (s, "abs(x)".into()),
        (U::Neg, U32) => return None,
        (U::Neg, _) => (s, "-x".into()),
        (U::Sin, _) => float("sin(x)")?,
        (U::Cos, _) => float("cos(x)")?,
        (U::Tan, _) => float("tan(x)")?,
        (U::Sinh, _) => float("sinh(x)")?,
        (U::Cosh, _) => float("cosh(x)")?,
        (U::Asin, _) => float("atan2(x, sqrt((1.0 - x) * (1.0 + x)))")?,
        (U::Acos, _) => float("atan2(sqrt((1.0 - x) * (1.0 + x)), x)")?,
        (U::Atan, _) => float("atan(x)")?,
        (U::Asinh, _) => float("log(x + sqrt(x * x + 1.0))")?,
        (U::Acosh, _) => float("log(x + sqrt(x * x - 1.0))")?,
        (U::Atanh, _) => float("0.5 * log((1.0 + x) / (1.0 - x))")?,
        (U::Ceil, _) => float("ceil(x)")?,
        (U::Floor, _) => float("floor(x)")?,
        (U::Round, _) => float("round(x)")?,
        (U::Erf, _) => float("k_erf(x)")?,
        (U::Not, U32) => (U32, "select(0u, 1u, x == 0u)".into()),
        (U::Not, I32) => (I32, "~x".into()),
        (U::Not, F32) => return None,
        (U::Sign, F32) => (F32, "select(sign(x), x, k_is_nan(x))".into()),
        (U::Sign, I32) => (I32, "sign(x)".into()),
        (U::Sign, U32) => (U32, "min(x, 1u)".into()),
        (U::IsNan, F32) => (U32, "select(0u, 1u, k_is_nan(x))".into()),
        (U::IsInf { detect_positive, detect_negative }, F32) => {
            let p = if detect_positive { "bitcast<u32>(x) == F32_INF" } else { "false" };
            let n = if detect_negative { "bitcast<u32>(x) == 0xff800000u" } else { "false" };
            (U32, format!("select(0u, 1u, ({p}) || ({n}))"))
        }
        _ => return None,
    };
    Some((o, format!("{}{MATH}\nfn op(x: A) -> O {{ return {body}; }}\n", aliases(s, o))))
}

/// An activation's `op(x)` (f32 only; parameters come from params[1..4]) and the
/// parameter values.
pub fn activation(kind: &ActivationKind, s: Storage) -> Option<(String, [f32; 3])> {
    use ActivationKind as K;
    if s != Storage::F32 {
        return match kind {
            K::Relu => Some((format!("{}fn op(x: A) -> O {{ return max(x, A(0)); }}\n", aliases(s, s)), [0.0; 3])),
            _ => None,
        };
    }
    let (body, p): (&str, [f32; 3]) = match *kind {
        K::Relu => ("max(x, 0.0)", [0.0; 3]),
        K::Sigmoid => ("1.0 / (1.0 + exp(-x))", [0.0; 3]),
        K::Tanh => ("k_tanh(x)", [0.0; 3]),
        K::LeakyRelu { alpha } => ("select(x, x * p0, x < 0.0)", [alpha, 0.0, 0.0]),
        K::Elu { alpha } => ("select(x, p0 * (exp(x) - 1.0), x < 0.0)", [alpha, 0.0, 0.0]),
        K::Selu { alpha, gamma } => ("p1 * select(x, p0 * (exp(x) - 1.0), x <= 0.0)", [alpha, gamma, 0.0]),
        K::Softsign => ("x / (1.0 + abs(x))", [0.0; 3]),
        K::Softplus => ("max(x, 0.0) + log(1.0 + exp(-abs(x)))", [0.0; 3]),
        K::Clip { min, max } => ("min(max(x, p0), p1)", [min, max, 0.0]),
        K::HardSigmoid { alpha, beta } => ("max(0.0, min(1.0, p0 * x + p1))", [alpha, beta, 0.0]),
        K::HardSwish => ("x * max(0.0, min(1.0, x / 6.0 + 0.5))", [0.0; 3]),
        K::ScaledTanh { alpha, beta } => ("p0 * k_tanh(p1 * x)", [alpha, beta, 0.0]),
        K::ThresholdedRelu { alpha } => ("select(0.0, x, x > p0)", [alpha, 0.0, 0.0]),
        K::GeluErf => ("0.5 * x * (1.0 + k_erf(x * 0.70710678118654752))", [0.0; 3]),
        K::GeluTanh => ("0.5 * x * (1.0 + k_tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)))", [0.0; 3]),
        K::Celu { alpha } => ("select(p0 * (exp(x / p0) - 1.0), x, x > 0.0)", [alpha, 0.0, 0.0]),
        K::Mish => ("x * k_tanh(max(x, 0.0) + log(1.0 + exp(-abs(x))))", [0.0; 3]),
        K::Swish => ("x / (1.0 + exp(-x))", [0.0; 3]),
    };
    let src = format!(
        "{}{MATH}\nfn op(x: A) -> O {{ let p0 = param_f(1u); let p1 = param_f(2u); let p2 = param_f(3u); \
         return {body}; }}\n",
        aliases(s, s)
    );
    Some((src, p))
}

/// The overflow and e8m0 rounding modes of a Cast to a float8 / float4 type (ONNX's
/// `saturate` and `round_mode`); the default is plain Cast's: saturate, round up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CastMode {
    pub saturate: bool,
    pub e8m0_rounding: E8M0Rounding,
}

impl Default for CastMode {
    fn default() -> CastMode {
        CastMode { saturate: true, e8m0_rounding: E8M0Rounding::Up }
    }
}

/// The conversion `op(x)` of a Cast from `from` to `to` (saturating float→int through the
/// clamp bounds given as params[1..3], with those bounds), bit-exact with the cpu backend
/// for every type the words hold exactly; its output storage.
pub fn cast(from: DataType, to: DataType, mode: CastMode) -> Option<(Storage, String, [f32; 3])> {
    use Storage::*;
    let (a, o) = (Storage::of(from)?, Storage::of(to)?);
    let (lo, hi) = int_range(to);
    // The cpu backend decodes every float8 / float4 NaN code to the positive NaN.
    let x = if from.is_narrow_float() { "mf_canonical_nan(x)" } else { "x" };
    let fx = if a == F32 { x.to_string() } else { "f32(x)".to_string() };
    let body = if to == DataType::Bool && a == F32 {
        // On the bits: a NaN is nonzero (as on cpu), which a float compare need not say.
        "select(0u, 1u, (bitcast<u32>(x) & 0x7fffffffu) != 0u)".to_string()
    } else if to == DataType::Bool {
        "select(0u, 1u, x != A(0))".to_string()
    } else if to == DataType::F8E8M0 {
        let rounding = match mode.e8m0_rounding {
            E8M0Rounding::Up => "E8M0_UP",
            E8M0Rounding::Down => "E8M0_DOWN",
            E8M0Rounding::Nearest => "E8M0_NEAREST",
        };
        format!("round_to_f8e8m0_mode({fx}, {}, {rounding})", mode.saturate)
    } else if to.is_narrow_float() {
        format!("round_to_{}_mode({fx}, {})", to.name(), mode.saturate)
    } else if let Some(bits) = to.packed_bits().filter(|_| to.is_narrow_integer()) {
        // 4- and 2-bit integers: the low bits of the (truncated) value, as the cpu wraps.
        let low = match a {
            F32 => format!("low_bits_of_trunc({x})"),
            I32 => "bitcast<u32>(x)".into(),
            U32 => "x".into(),
        };
        if to.is_signed_integer() {
            format!("bitcast<i32>(({low}) << {s}u) >> {s}u", s = 32 - bits)
        } else {
            format!("({low}) & {}u", (1u32 << bits) - 1)
        }
    } else {
        match (a, o) {
            (F32, F32) => x.into(),
            (I32, I32) | (U32, U32) => "x".into(),
            // The clamp bound of the 32-bit types is the f32 below 2^31 / 2^32: beyond it
            // (infinity included) the cpu gives the type's maximum.
            (F32, I32) if matches!(to, DataType::I32 | DataType::I64) => {
                "select(select(i32(clamp(x, p0, p1)), 0x7fffffff, x > p1), 0, k_is_nan(x))".into()
            }
            (F32, U32) if matches!(to, DataType::U32 | DataType::U64) => {
                "select(select(u32(clamp(x, p0, p1)), 0xffffffffu, x > p1), 0u, k_is_nan(x))".into()
            }
            (F32, I32) => "select(i32(clamp(x, p0, p1)), 0, k_is_nan(x))".into(),
            (F32, U32) => "select(u32(clamp(x, p0, p1)), 0u, k_is_nan(x))".into(),
            (I32 | U32, F32) => "f32(x)".into(),
            (I32, U32) => "bitcast<u32>(x)".into(),
            // i64 is stored as i32: u32 / u64 values beyond i32 saturate, as f32 -> i64 does.
            (U32, I32) if to == DataType::I64 => "bitcast<i32>(min(x, 0x7fffffffu))".into(),
            (U32, I32) => "bitcast<i32>(x)".into(),
        }
    };
    let src = format!(
        "{}{MATH}{MINIFLOAT}\nfn op(x: A) -> O {{ let p0 = param_f(1u); let p1 = param_f(2u); return {body}; }}\n",
        aliases(a, o)
    );
    Some((o, src, [lo, hi, 0.0]))
}

/// The value range of an integer type as f32 clamp bounds (floats: unbounded).
fn int_range(t: DataType) -> (f32, f32) {
    match t {
        DataType::I8 => (-128.0, 127.0),
        DataType::I16 => (-32768.0, 32767.0),
        // The largest f32 values below 2^31 / 2^32, so the clamp never overflows.
        DataType::I32 | DataType::I64 => (-2147483648.0, 2147483520.0),
        DataType::U8 => (0.0, 255.0),
        DataType::U16 => (0.0, 65535.0),
        // u64 is stored as u32: results beyond u32 saturate (documented in the README).
        DataType::U32 | DataType::U64 => (0.0, 4294967040.0),
        _ => (f32::MIN, f32::MAX),
    }
}

/// The `init` / `step` / `finish` functions of a reduction on `s`, or `None`.
pub fn reduce(op: ReduceOp, s: Storage) -> Option<String> {
    use ReduceOp as R;
    use Storage::*;
    let (acc, init, step, finish) = match (op, s) {
        (R::Sum, _) => ("A", "A(0)", "acc + v", "acc"),
        (R::Prod, _) => ("A", "A(1)", "acc * v", "acc"),
        (R::Max, F32) => ("f32", "neg_inf()", "select(max(acc, v), v, k_is_nan(v) || k_is_nan(acc))", "acc"),
        (R::Min, F32) => ("f32", "pos_inf()", "select(min(acc, v), v, k_is_nan(v) || k_is_nan(acc))", "acc"),
        (R::Max, I32) => ("i32", "bitcast<i32>(0x80000000u)", "max(acc, v)", "acc"),
        (R::Min, I32) => ("i32", "0x7fffffff", "min(acc, v)", "acc"),
        (R::Max, U32) => ("u32", "0u", "max(acc, v)", "acc"),
        (R::Min, U32) => ("u32", "0xffffffffu", "min(acc, v)", "acc"),
        (R::Mean, F32) => ("f32", "0.0", "acc + v", "acc / f32(n)"),
        (R::Mean, _) => ("A", "A(0)", "acc + v", "select(acc / A(n), A(0), n == 0u)"),
        (R::L1, U32) => ("u32", "0u", "acc + v", "acc"),
        (R::L1, _) => ("A", "A(0)", "acc + abs(v)", "acc"),
        (R::L2, F32) => ("f32", "0.0", "acc + v * v", "sqrt(acc)"),
        (R::L2, _) => ("f32", "0.0", "acc + f32(v) * f32(v)", "A(round(sqrt(acc)))"),
        (R::SumSquare, _) => ("A", "A(0)", "acc + v * v", "acc"),
        (R::LogSum, F32) => ("f32", "0.0", "acc + v", "log(acc)"),
        (R::LogSumExp, F32) => (
            "vec2<f32>",
            "vec2<f32>(neg_inf(), 0.0)",
            "select(vec2<f32>(max(acc.x, v), acc.y * exp(acc.x - max(acc.x, v)) + exp(v - max(acc.x, v))), acc, v == neg_inf())",
            "acc.x + log(acc.y)",
        ),
        _ => return None,
    };
    Some(format!(
        "{}alias ACC = {acc};\n{MATH}\nfn init() -> ACC {{ return {init}; }}\n\
         fn step(acc: ACC, v: A) -> ACC {{ return {step}; }}\n\
         fn finish(acc: ACC, n: u32) -> O {{ return {finish}; }}\n",
        aliases(s, s)
    ))
}
