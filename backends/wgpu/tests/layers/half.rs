//! f16 layers against the cpu backend in the fp16 tier, with f16 tensors stored as halves
//! (where the adapter has SHADER_F16) and as f32 words (`WgpuBackend::without_f16_storage`):
//! pointwise, matmul, reductions and layout layers, special values, and a loop iterating an
//! f16 tensor (sliced and stacked on the device).

use crate::common::*;
use kiln::{
    ActivationKind, DataType, ElementwiseOp, GatherMode, HostTensor, LayerKind, LoopOutputKind, Network, Shape,
    ShuffleParams, TensorData, TripLimitKind, UnaryOp,
};
use kiln_wgpu::WgpuBackend;

/// The fp16 tier: a few f16 ulps relative, plus an absolute floor for values near zero.
const RTOL: f64 = 4e-3;
const ATOL: f64 = 1e-3;

/// Both storages of f16 tensors, named.
fn storages() -> Option<[(WgpuBackend, &'static str); 2]> {
    gpu()?;
    Some([(WgpuBackend::new(), "halves"), (WgpuBackend::without_f16_storage(), "f32 words")])
}

fn f16s(r: &mut rand_chacha::ChaCha8Rng, shape: &[usize], lo: f32, hi: f32) -> HostTensor {
    cast(&rand_f32(r, shape, lo, hi), DataType::F16)
}

#[test]
fn the_storage_switch_is_honoured() {
    let Some(gpu) = gpu() else { return };
    let halves = gpu.stores_f16_as_halves().expect("device");
    eprintln!("f16 tensors stored as halves on this adapter: {halves}");
    assert!(!WgpuBackend::without_f16_storage().stores_f16_as_halves().expect("device"));
}

#[test]
fn f16_pointwise_layers_match_cpu() {
    let Some(backends) = storages() else { return };
    for (gpu, storage) in &backends {
        let mut r = rng(60);
        // Odd lengths: the last word of a halves buffer is half used.
        let (a, b) = (f16s(&mut r, &[4, 33], -3.0, 3.0), f16s(&mut r, &[33], -3.0, 3.0));
        for op in [ElementwiseOp::Sum, ElementwiseOp::Prod, ElementwiseOp::Div, ElementwiseOp::Max] {
            let ins = vec![In::Run(a.clone()), In::Run(b.clone())];
            check_tol(gpu, LayerKind::Elementwise { op }, ins, RTOL, ATOL, &format!("{storage}: f16 {op:?}"));
        }
        let ins = vec![In::Run(a.clone()), In::Run(b.clone())];
        check_tol(gpu, LayerKind::Elementwise { op: ElementwiseOp::Less }, ins, 0.0, 0.0, &format!("{storage}: Less"));
        for op in [UnaryOp::Exp, UnaryOp::Abs, UnaryOp::Sqrt, UnaryOp::Neg] {
            let x = if op == UnaryOp::Sqrt { f16s(&mut r, &[7, 5], 0.0, 4.0) } else { a.clone() };
            check_tol(gpu, LayerKind::Unary { op }, vec![In::Run(x)], RTOL, ATOL, &format!("{storage}: f16 {op:?}"));
        }
        for kind in [ActivationKind::Relu, ActivationKind::Sigmoid, ActivationKind::GeluErf] {
            let ins = vec![In::Run(a.clone())];
            check_tol(gpu, LayerKind::Activation { kind }, ins, RTOL, ATOL, &format!("{storage}: f16 {kind:?}"));
        }
        for (to, x) in [(DataType::F32, a.clone()), (DataType::F16, rand_f32(&mut r, &[9], -70000.0, 70000.0))] {
            check_tol(gpu, LayerKind::Cast { to }, vec![In::Run(x)], 0.0, 0.0, &format!("{storage}: Cast to {to}"));
        }
    }
}

#[test]
fn f16_matmul_and_reductions_match_cpu() {
    let Some(backends) = storages() else { return };
    for (gpu, storage) in &backends {
        let mut r = rng(61);
        use kiln::MatrixOp::{None as N, Transpose as T};
        // K = 9: widened; then the f16 GEMM (K and N multiples of 4), batched, broadcast
        // and with a run-time B; a transposed B is widened again.
        for (a, b, op_b) in [
            (vec![3, 17, 9], vec![9, 5], N),
            (vec![2, 70, 12], vec![12, 36], N),
            (vec![2, 1, 5, 8], vec![3, 8, 4], N),
            (vec![4, 16], vec![20, 16], T),
        ] {
            let (ta, tb) = (f16s(&mut r, &a, -1.0, 1.0), f16s(&mut r, &b, -1.0, 1.0));
            let mm = LayerKind::MatrixMultiply { op_a: N, op_b };
            let what = format!("{storage}: f16 matmul {a:?} x {b:?} {op_b:?}");
            check_tol(gpu, mm.clone(), vec![In::Run(ta.clone()), In::Const(tb.clone())], RTOL, ATOL, &what);
            check_tol(gpu, mm, vec![In::Run(ta), In::Run(tb)], RTOL, ATOL, &what);
        }
        let x = f16s(&mut r, &[2, 3, 11], -4.0, 4.0);
        let kind = LayerKind::SoftMax { axis: 2 };
        check_tol(gpu, kind, vec![In::Run(x.clone())], RTOL, ATOL, &format!("{storage}: f16 softmax"));
        let kind = LayerKind::Normalization { axes: vec![2], epsilon: 1e-5, num_groups: 1 };
        let (scale, bias) = (f16s(&mut r, &[1, 1, 11], 0.5, 1.5), f16s(&mut r, &[1, 1, 11], -0.5, 0.5));
        let ins = vec![In::Run(x.clone()), In::Const(scale), In::Const(bias)];
        check_tol(gpu, kind, ins, RTOL, 1e-2, &format!("{storage}: f16 layer norm"));
        let kind = LayerKind::RmsNormalization { axes: vec![2], epsilon: 1e-6 };
        let ins = vec![In::Run(x.clone()), In::Run(f16s(&mut r, &[11], 0.5, 1.5))];
        check_tol(gpu, kind, ins, RTOL, 1e-2, &format!("{storage}: f16 rms norm"));
        let kind = LayerKind::Reduce { op: kiln::ReduceOp::Sum, axes: vec![1], keep_dims: true };
        check_tol(gpu, kind, vec![In::Run(x)], RTOL, ATOL, &format!("{storage}: f16 reduce sum"));
    }
}

#[test]
fn f16_layout_layers_and_special_values_match_cpu() {
    let Some(backends) = storages() else { return };
    let special: Vec<half::f16> = [0x7e01u16, 0xfe00, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7bff, 0x3c00]
        .into_iter()
        .map(half::f16::from_bits)
        .collect();
    let special = HostTensor::new(vec![9], TensorData::F16(special)).expect("shape");
    for (gpu, storage) in &backends {
        let mut r = rng(62);
        // Moved values keep their bits: NaN signs, -0, subnormals, infinities, the largest f16.
        let (net, feeds) = one_layer(LayerKind::Identity, vec![In::Run(special.clone())]);
        let (got, _) = both(gpu, &net, &feeds);
        let (TensorData::F16(got), TensorData::F16(want)) = (got[0].data(), special.data()) else {
            panic!("{storage}: Identity changed the type")
        };
        for (g, w) in got.iter().zip(want) {
            let same = g.to_bits() == w.to_bits()
                || (g.is_nan() && w.is_nan() && g.is_sign_negative() == w.is_sign_negative());
            assert!(same, "{storage}: {w:?} ({:#06x}) came back as {g:?} ({:#06x})", w.to_bits(), g.to_bits());
        }
        let x = f16s(&mut r, &[2, 3, 5], -1.0, 1.0);
        let p = ShuffleParams {
            first_transpose: vec![2, 0, 1],
            reshape: Some(vec![5, -1]),
            second_transpose: vec![1, 0],
            zero_is_placeholder: true,
        };
        check_tol(gpu, LayerKind::Shuffle(p), vec![In::Run(x.clone())], 0.0, 0.0, &format!("{storage}: shuffle"));
        let ins = vec![In::Run(x.clone()), In::Run(f16s(&mut r, &[2, 1, 5], -1.0, 1.0))];
        check_tol(gpu, LayerKind::Concatenation { axis: 1 }, ins, 0.0, 0.0, &format!("{storage}: concat"));
        let ins = vec![In::Run(x.clone()), In::Const(i64s(&[3], &[4, 0, 2]))];
        let gather = LayerKind::Gather { mode: GatherMode::Default { axis: 2 } };
        check_tol(gpu, gather, ins, 0.0, 0.0, &format!("{storage}: gather"));
        // A large constant (uploaded once, kept between runs) in halves.
        let big = f16s(&mut r, &[3, 1, 2000], -1.0, 1.0);
        let ins = vec![In::Run(f16s(&mut r, &[3, 4, 2000], -1.0, 1.0)), In::Const(big)];
        let sum = LayerKind::Elementwise { op: ElementwiseOp::Sum };
        check_tol(gpu, sum, ins, RTOL, ATOL, &format!("{storage}: f16 sum with a large constant"));
    }
}

#[test]
fn a_loop_iterates_and_stacks_f16_tensors() {
    let Some(backends) = storages() else { return };
    for (gpu, storage) in &backends {
        let mut r = rng(63);
        let mut n = Network::new("iterate f16");
        let m = n.add_input("m", DataType::F16, Shape::fixed(&[3, 5])).unwrap();
        let trips = n.add_constant(&[], TensorData::I32(vec![3])).unwrap();
        let looping = n.add_loop();
        n.add_trip_limit(looping, n.output(trips, 0), TripLimitKind::Count).unwrap();
        let it = n.add_iterator(looping, m, 0, true).unwrap();
        let slice = n.output(it, 0);
        let squared = n.add_elementwise(slice, slice, ElementwiseOp::Prod).unwrap();
        let out = n.add_loop_output(looping, n.output(squared, 0), LoopOutputKind::Concatenate, 1).unwrap();
        let out = n.output(out, 0);
        n.mark_output(out).unwrap();
        let (got, want) = both(gpu, &n, &[f16s(&mut r, &[3, 5], -2.0, 2.0)]);
        assert_eq!(got[0].dtype(), DataType::F16);
        assert_close(&got[0], &want[0], 0.0, 0.0, &format!("{storage}: f16 loop"));
    }
}
