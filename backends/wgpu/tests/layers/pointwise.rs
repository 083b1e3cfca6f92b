//! Elementwise (every op, broadcasting, f32 / i32 / bool), unary, activations, casts,
//! select and parametric ReLU.

use crate::common::*;
use kiln::{ActivationKind, DataType, ElementwiseOp, HostTensor, LayerKind, UnaryOp};

const OPS: [ElementwiseOp; 23] = {
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

#[test]
fn elementwise_f32_broadcast() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(1);
    for op in OPS.into_iter().filter(|op| !op.is_logical() && !op.is_bitwise()) {
        let a = rand_f32(&mut r, &[2, 3, 4], 0.5, 3.0);
        let b = rand_f32(&mut r, &[3, 1], 0.5, 3.0);
        check(&gpu, LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)], &format!("{op:?} f32"));
    }
    // Signs matter for Mod / Fmod / FloorDiv / Pow.
    for op in [ElementwiseOp::Mod, ElementwiseOp::Fmod, ElementwiseOp::FloorDiv, ElementwiseOp::Sub] {
        let a = rand_f32(&mut r, &[5, 7], -4.0, 4.0);
        let b = rand_f32(&mut r, &[7], 0.5, 2.0);
        check(&gpu, LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)], &format!("{op:?} signed f32"));
    }
    let base = HostTensor::from_f32(vec![4], vec![-2.0, -3.0, 0.0, 2.5]).unwrap();
    let exp = HostTensor::from_f32(vec![4], vec![2.0, 3.0, 2.0, 0.5]).unwrap();
    check(
        &gpu,
        LayerKind::Elementwise { op: ElementwiseOp::Pow },
        vec![In::Run(base), In::Run(exp)],
        "Pow negative base",
    );
}

#[test]
fn elementwise_i32_and_bool() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(2);
    for op in OPS.into_iter().filter(|op| !op.is_logical()) {
        let (a, b) = match op {
            ElementwiseOp::ShiftLeft | ElementwiseOp::ShiftRight => {
                (rand_i32(&mut r, &[4, 5], 0, 1000), rand_i32(&mut r, &[5], 0, 8))
            }
            ElementwiseOp::Pow => (rand_i32(&mut r, &[4, 5], -5, 5), rand_i32(&mut r, &[5], 0, 5)),
            _ => (rand_i32(&mut r, &[4, 5], -50, 50), rand_i32(&mut r, &[5], 1, 9)),
        };
        check(&gpu, LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)], &format!("{op:?} i32"));
    }
    for op in OPS.into_iter().filter(|op| op.is_logical()) {
        let (a, b) = (rand_bool(&mut r, &[3, 4]), rand_bool(&mut r, &[1, 4]));
        check(&gpu, LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)], &format!("{op:?} bool"));
    }
    // i64 is stored as i32 on the device and comes back as i64.
    let a = cast(&rand_i32(&mut r, &[6], -100, 100), DataType::I64);
    let b = cast(&rand_i32(&mut r, &[6], 1, 100), DataType::I64);
    check(&gpu, LayerKind::Elementwise { op: ElementwiseOp::Prod }, vec![In::Run(a), In::Run(b)], "Prod i64");
}

#[test]
fn unary_ops() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(3);
    use UnaryOp::*;
    for op in [
        Exp, Log, Sqrt, Recip, Abs, Neg, Sin, Cos, Tan, Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh, Ceil, Floor,
        Round, Erf, Sign,
    ] {
        let (lo, hi) = match op {
            Log | Sqrt | Recip => (0.1, 5.0),
            Asin | Acos | Atanh => (-0.9, 0.9),
            Acosh => (1.1, 5.0),
            _ => (-3.0, 3.0),
        };
        let x = rand_f32(&mut r, &[3, 50], lo, hi);
        // Transcendentals: GPU libm is looser than the host's; 1e-5 relative + 1e-6 absolute.
        check_tol(&gpu, LayerKind::Unary { op }, vec![In::Run(x)], 1e-5, 1e-6, &format!("{op:?}"));
    }
    let special = HostTensor::from_f32(vec![5], vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.5]).unwrap();
    for op in [
        IsNan,
        IsInf { detect_positive: true, detect_negative: true },
        IsInf { detect_positive: false, detect_negative: true },
    ] {
        check(&gpu, LayerKind::Unary { op }, vec![In::Run(special.clone())], &format!("{op:?}"));
    }
    check(&gpu, LayerKind::Unary { op: Not }, vec![In::Run(rand_bool(&mut r, &[9]))], "Not bool");
    check(&gpu, LayerKind::Unary { op: Abs }, vec![In::Run(rand_i32(&mut r, &[9], -9, 9))], "Abs i32");
}

#[test]
fn activations() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(4);
    use ActivationKind::*;
    let kinds = [
        Relu,
        Sigmoid,
        Tanh,
        LeakyRelu { alpha: 0.1 },
        Elu { alpha: 0.7 },
        Selu { alpha: 1.67, gamma: 1.05 },
        Softsign,
        Softplus,
        Clip { min: -0.5, max: 0.8 },
        HardSigmoid { alpha: 0.2, beta: 0.5 },
        HardSwish,
        ScaledTanh { alpha: 1.5, beta: 0.5 },
        ThresholdedRelu { alpha: 0.3 },
        GeluErf,
        GeluTanh,
        Celu { alpha: 0.9 },
        Mish,
        Swish,
    ];
    for kind in kinds {
        let x = rand_f32(&mut r, &[4, 33], -4.0, 4.0);
        check_tol(&gpu, LayerKind::Activation { kind }, vec![In::Run(x)], 1e-5, 1e-6, &format!("{kind:?}"));
    }
}

#[test]
fn casts_and_narrow_types() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(5);
    let x = rand_f32(&mut r, &[40], -300.0, 300.0);
    for to in [
        DataType::I32,
        DataType::I8,
        DataType::U8,
        DataType::Bool,
        DataType::F16,
        DataType::BF16,
        DataType::I64,
        DataType::U16,
    ] {
        check(&gpu, LayerKind::Cast { to }, vec![In::Run(x.clone())], &format!("f32 -> {to}"));
    }
    let i = rand_i32(&mut r, &[40], -1000, 1000);
    for to in [DataType::F32, DataType::I8, DataType::U8, DataType::Bool, DataType::F16, DataType::U32] {
        check(&gpu, LayerKind::Cast { to }, vec![In::Run(i.clone())], &format!("i32 -> {to}"));
    }
    check(&gpu, LayerKind::Cast { to: DataType::F32 }, vec![In::Run(rand_bool(&mut r, &[7]))], "bool -> f32");
    // f16 arithmetic rounds every output, as the cpu backend does.
    let (a, b) = (
        cast(&rand_f32(&mut r, &[64], -2.0, 2.0), DataType::F16),
        cast(&rand_f32(&mut r, &[64], -2.0, 2.0), DataType::F16),
    );
    check(&gpu, LayerKind::Elementwise { op: ElementwiseOp::Prod }, vec![In::Run(a), In::Run(b)], "f16 Prod");
    let (a, b) =
        (cast(&rand_i32(&mut r, &[64], 0, 255), DataType::U8), cast(&rand_i32(&mut r, &[64], 0, 255), DataType::U8));
    check(&gpu, LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![In::Run(a), In::Run(b)], "u8 Sum wraps");
}

#[test]
fn select_and_prelu() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(6);
    let (c, a, b) =
        (rand_bool(&mut r, &[3, 1, 5]), rand_f32(&mut r, &[4, 5], -1.0, 1.0), rand_f32(&mut r, &[3, 4, 1], -1.0, 1.0));
    check(&gpu, LayerKind::Select, vec![In::Run(c), In::Run(a), In::Run(b)], "Select");
    let (x, slope) = (rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0), rand_f32(&mut r, &[3, 1], 0.0, 0.5));
    check(&gpu, LayerKind::ParametricRelu, vec![In::Run(x), In::Const(slope)], "PRelu");
}
