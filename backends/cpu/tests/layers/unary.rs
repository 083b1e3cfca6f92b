//! Unary ops and activations.

use crate::common::*;
use kiln::{ActivationKind as A, DataType, HostTensor, LayerKind, UnaryOp as U};

fn unary(op: U, x: HostTensor) -> HostTensor {
    run1(LayerKind::Unary { op }, vec![In::Run(x)])
}

fn act(kind: A, x: HostTensor) -> HostTensor {
    run1(LayerKind::Activation { kind }, vec![In::Run(x)])
}

/// Checks a float op on f32 and f64 against a reference formula in f64.
fn check_float_unary(op: U, inputs: &[f64], reference: fn(f64) -> f64) {
    let expected: Vec<f64> = inputs.iter().map(|&v| reference(v)).collect();
    let n = inputs.len();
    let y = unary(op, f64s(&[n], inputs));
    assert_close(&y, DataType::F64, &[n], &expected, 1e-15);
    let as_f32: Vec<f32> = inputs.iter().map(|&v| v as f32).collect();
    let expected32: Vec<f64> = as_f32.iter().map(|&v| reference(v as f64)).collect();
    assert_close(&unary(op, f32s(&[n], &as_f32)), DataType::F32, &[n], &expected32, 1e-6);
}

#[test]
fn float_unary_ops_match_their_formulas() {
    let xs = [-0.9, -0.3, 0.0, 0.4, 0.8];
    check_float_unary(U::Exp, &xs, f64::exp);
    check_float_unary(U::Log, &[0.5, 1.0, 3.0], f64::ln);
    check_float_unary(U::Sqrt, &[0.0, 2.0, 9.0], f64::sqrt);
    check_float_unary(U::Recip, &[0.5, -4.0, 3.0], |v| 1.0 / v);
    check_float_unary(U::Abs, &xs, f64::abs);
    check_float_unary(U::Neg, &xs, |v| -v);
    check_float_unary(U::Sin, &xs, f64::sin);
    check_float_unary(U::Cos, &xs, f64::cos);
    check_float_unary(U::Tan, &xs, f64::tan);
    check_float_unary(U::Sinh, &xs, f64::sinh);
    check_float_unary(U::Cosh, &xs, f64::cosh);
    check_float_unary(U::Asin, &xs, f64::asin);
    check_float_unary(U::Acos, &xs, f64::acos);
    check_float_unary(U::Atan, &xs, f64::atan);
    check_float_unary(U::Asinh, &xs, f64::asinh);
    check_float_unary(U::Acosh, &[1.0, 1.5, 4.0], f64::acosh);
    check_float_unary(U::Atanh, &xs, f64::atanh);
    check_float_unary(U::Ceil, &[-1.5, -0.2, 0.2, 2.0], f64::ceil);
    check_float_unary(U::Floor, &[-1.5, -0.2, 0.2, 2.0], f64::floor);
}

#[test]
fn erf_matches_tabulated_values() {
    // erf(0.5), erf(1), erf(-2) from standard tables.
    let y = unary(U::Erf, f64s(&[4], &[0.0, 0.5, 1.0, -2.0]));
    assert_close(&y, DataType::F64, &[4], &[0.0, 0.5204998778130465, 0.8427007929497149, -0.9953222650189527], 1e-15);
}

#[test]
fn round_is_half_to_even_and_sign_keeps_zero_and_nan() {
    let y = unary(U::Round, f32s(&[7], &[0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6]));
    assert_close(&y, DataType::F32, &[7], &[0.0, 2.0, 2.0, 0.0, -2.0, 2.0, 3.0], 0.0);
    let y = unary(U::Sign, f16s(&[4], &[-3.0, 0.0, 7.0, f32::NAN]));
    assert_close(&y, DataType::F16, &[4], &[-1.0, 0.0, 1.0, f64::NAN], 0.0);
    assert_exact(&unary(U::Sign, i32s(&[3], &[-9, 0, 4])), &i32s(&[3], &[-1, 0, 1]));
}

#[test]
fn integer_unary_ops_wrap_and_not_is_bitwise_or_logical() {
    assert_exact(&unary(U::Abs, i8s(&[3], &[-128, -5, 5])), &i8s(&[3], &[-128, 5, 5]));
    assert_exact(&unary(U::Neg, i8s(&[2], &[-128, 7])), &i8s(&[2], &[-128, -7]));
    assert_exact(&unary(U::Neg, u8s(&[2], &[1, 0])), &u8s(&[2], &[255, 0]));
    assert_exact(&unary(U::Not, u8s(&[2], &[0x0f, 0])), &u8s(&[2], &[0xf0, 0xff]));
    assert_exact(&unary(U::Not, i32s(&[1], &[0])), &i32s(&[1], &[-1]));
    assert_exact(&unary(U::Not, bools(&[2], &[true, false])), &bools(&[2], &[false, true]));
}

#[test]
fn is_nan_and_is_inf_classify_floats() {
    let x = f32s(&[4], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0]);
    assert_exact(&unary(U::IsNan, x.clone()), &bools(&[4], &[true, false, false, false]));
    let inf = |p, n| unary(U::IsInf { detect_positive: p, detect_negative: n }, x.clone());
    assert_exact(&inf(true, true), &bools(&[4], &[false, true, true, false]));
    assert_exact(&inf(true, false), &bools(&[4], &[false, true, false, false]));
    assert_exact(&inf(false, true), &bools(&[4], &[false, false, true, false]));
}

/// Every activation at a few points against its formula, evaluated in f64.
#[test]
fn activations_match_their_formulas() {
    let xs = [-3.0, -0.5, 0.0, 0.7, 2.5];
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let softplus = |x: f64| (1.0 + x.exp()).ln();
    let erf = |x: f64| libm_erf(x);
    type Formula = Box<dyn Fn(f64) -> f64>;
    let cases: Vec<(A, Formula)> = vec![
        (A::Relu, Box::new(|x| x.max(0.0))),
        (A::Sigmoid, Box::new(sigmoid)),
        (A::Tanh, Box::new(f64::tanh)),
        (A::LeakyRelu { alpha: 0.1 }, Box::new(|x| if x < 0.0 { 0.1f32 as f64 * x } else { x })),
        (A::Elu { alpha: 1.5 }, Box::new(|x| if x < 0.0 { 1.5 * (x.exp() - 1.0) } else { x })),
        (A::Selu { alpha: 1.5, gamma: 2.0 }, Box::new(|x| 2.0 * if x <= 0.0 { 1.5 * (x.exp() - 1.0) } else { x })),
        (A::Softsign, Box::new(|x| x / (1.0 + x.abs()))),
        (A::Softplus, Box::new(softplus)),
        (A::Clip { min: -1.0, max: 1.5 }, Box::new(|x| x.clamp(-1.0, 1.5))),
        (A::HardSigmoid { alpha: 0.25, beta: 0.5 }, Box::new(|x| (0.25 * x + 0.5).clamp(0.0, 1.0))),
        (A::HardSwish, Box::new(|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0))),
        (A::ScaledTanh { alpha: 2.0, beta: 0.5 }, Box::new(|x| 2.0 * (0.5 * x).tanh())),
        (A::ThresholdedRelu { alpha: 0.5 }, Box::new(|x| if x > 0.5 { x } else { 0.0 })),
        (A::GeluErf, Box::new(move |x| 0.5 * x * (1.0 + erf(x / 2f64.sqrt())))),
        (
            A::GeluTanh,
            Box::new(|x| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())),
        ),
        (A::Celu { alpha: 2.0 }, Box::new(|x| if x > 0.0 { x } else { 2.0 * ((x / 2.0).exp() - 1.0) })),
        (A::Mish, Box::new(move |x| x * softplus(x).tanh())),
        (A::Swish, Box::new(move |x| x * sigmoid(x))),
    ];
    for (kind, f) in cases {
        let expected: Vec<f64> = xs.iter().map(|&x| f(x)).collect();
        let y = act(kind, f64s(&[xs.len()], &xs));
        assert_close(&y, DataType::F64, &[xs.len()], &expected, 1e-12);
        let x32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let y = act(kind, f32s(&[xs.len()], &x32));
        assert_close(&y, DataType::F32, &[xs.len()], &expected, 2e-6);
        let y = act(kind, bf16s(&[xs.len()], &x32));
        assert_close(&y, DataType::BF16, &[xs.len()], &expected, 1e-2);
    }
}

/// erf by its Maclaurin series (converges fast for |x| < 3), independent of the backend's.
fn libm_erf(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..80 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn activations_are_stable_at_extremes() {
    let y = act(A::Softplus, f32s(&[2], &[100.0, -100.0]));
    assert_close(&y, DataType::F32, &[2], &[100.0, (-100f64).exp()], 1e-6);
    let y = act(A::Sigmoid, f32s(&[2], &[-1000.0, 1000.0]));
    assert_close(&y, DataType::F32, &[2], &[0.0, 1.0], 0.0);
    let y = act(A::Clip { min: 0.0, max: 1.0 }, f32s(&[1], &[f32::NAN]));
    assert_close(&y, DataType::F32, &[1], &[f64::NAN], 0.0);
}

#[test]
fn relu_and_clip_run_on_integers() {
    assert_exact(&act(A::Relu, i32s(&[3], &[-4, 0, 9])), &i32s(&[3], &[0, 0, 9]));
    // Bounds convert like Cast: -1.5 → -1, 2.7 → 2.
    assert_exact(&act(A::Clip { min: -1.5, max: 2.7 }, i8s(&[4], &[-100, -1, 2, 100])), &i8s(&[4], &[-1, -1, 2, 2]));
    assert_exact(&act(A::Clip { min: -1.0, max: 300.0 }, u8s(&[2], &[0, 255])), &u8s(&[2], &[0, 255]));
}
