//! Every element type on cuda against the cpu oracle, bit for bit: Cast between every pair of
//! kiln types (and CastNarrow with and without saturation), integer and f64 Elementwise, Unary
//! and Reduce, Quantize / Dequantize, BitCast. Inputs are random bytes (every NaN, infinity,
//! subnormal and extreme integer pattern is likely) plus hand-picked rounding cases.

use crate::common::{backend, rng};
use kiln::{
    Backend, DataType, E8M0Rounding, ElementwiseOp, HostTensor, LayerKind, Network, ReduceOp, Shape, TensorData, UnaryOp,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Random bytes as a tensor of `dtype` (bool bytes 0/1, 4/2-bit types their low bits).
fn random_bytes(r: &mut ChaCha8Rng, dtype: DataType, n: usize) -> HostTensor {
    let bits = dtype.packed_bits();
    let bytes: Vec<u8> = (0..n * dtype.size_bytes().expect("fixed-size type"))
        .map(|_| {
            let b: u8 = r.gen();
            match (dtype, bits) {
                (DataType::Bool, _) => b & 1,
                (_, Some(w)) => b & ((1u8 << w) - 1),
                _ => b,
            }
        })
        .collect();
    HostTensor::new(vec![n], TensorData::from_le_bytes(dtype, &bytes).expect("whole elements")).unwrap()
}

/// Values where conversions round, saturate, overflow or wrap.
fn tricky_f64() -> HostTensor {
    let p = |e: i32| 2f64.powi(e);
    let mut v = vec![
        0.0, -0.0, 0.25, 0.5, 1.5, 2.5, -2.5, 3.5, 5.0, 6.5, 7.0, 100.7, -100.7, 127.5, 128.0, 255.5, 256.0, -129.0, 300.0,
        448.0, 464.0, 480.0, 240.0, 248.0, 65504.0, 65520.0, 70000.0, 57344.0, 61440.0, 1e10, -1e10, 4294967296.5, 9.3e18,
        -9.3e18, 1.9e19, 3.4e38, 3.5e38, 1e300, -1e300, 1e-8, 1e-40, 1e-320, 0.1, 1.0 / 3.0, 0.0009765625,
        f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN,
    ];
    v.extend([p(-127), p(-128) * 1.5, p(24) + 1.0, p(53) + 2.0, p(63), -p(63), p(64), p(127), p(128)]);
    // Halfway points between neighbouring f16 / bf16 / f32 values (double-rounding traps).
    v.extend([1.0 + p(-11), 1.0 + p(-11) + p(-40), 1.0 + p(-8) + p(-30), 1.0 + p(-24) + p(-50), 1.0 + p(-24)]);
    let n = v.len();
    HostTensor::new(vec![n], TensorData::F64(v)).unwrap()
}

fn tricky_ints() -> (HostTensor, HostTensor) {
    let i = vec![
        i64::MAX, i64::MIN, (1 << 53) + 1, (1 << 24) + 1, -(1 << 24) - 1, i64::MAX - 1024, 65505, 255, 256, -1, -129,
        0x7FFF_FFFF_FFFF_F7FF, 2049, -2049, 0, 1, -8, 7, 15, 16,
    ];
    let u = vec![u64::MAX, 1 << 63, u64::MAX - 2047, u64::MAX - 1024, (1 << 53) + 1, 0, 1, 255, 65535, 4294967295];
    (
        HostTensor::new(vec![i.len()], TensorData::I64(i)).unwrap(),
        HostTensor::new(vec![u.len()], TensorData::U64(u)).unwrap(),
    )
}

/// Same bytes, or (for floats) both NaN element by element.
fn assert_same(what: &str, got: &HostTensor, want: &HostTensor) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}: type/shape");
    if got.data().to_le_bytes() == want.data().to_le_bytes() {
        return;
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        let same = (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
        assert!(same, "{what}: element {k}: cuda {a:e} vs cpu {b:e} ({:?} vs {:?})", got.data().to_le_bytes(), want.data().to_le_bytes());
    }
    // Equal as f64 but different bytes: only NaN payloads may differ.
}

/// Within `tolerance` relative to `1 + |cpu|` (transcendental functions: CUDA's libm vs Rust's).
fn assert_close(what: &str, got: &HostTensor, want: &HostTensor, tolerance: f64) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}: type/shape");
    for (k, (a, b)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == &b || (a - b).abs() <= tolerance * (1.0 + b.abs());
        assert!(ok, "{what}: element {k}: cuda {a:e} vs cpu {b:e}");
    }
}

/// Builds a network of `inputs` and layers `(kind, input slots)` whose outputs are all
/// marked, runs it on cuda and cpu, and returns (cuda, cpu) outputs; None without a device.
fn run_both(inputs: &[HostTensor], layers: &[(LayerKind, Vec<usize>)]) -> Option<Vec<(HostTensor, HostTensor)>> {
    let cuda = backend()?;
    let mut net = Network::new("dtypes");
    let ids: Vec<_> =
        inputs.iter().enumerate().map(|(i, t)| net.add_input(&format!("in{i}"), t.dtype(), Shape::fixed(t.shape())).unwrap()).collect();
    for (l, (kind, slots)) in layers.iter().enumerate() {
        let layer = net.add_layer(&format!("layer{l}"), kind.clone(), slots.iter().map(|&s| Some(ids[s])).collect()).unwrap();
        net.mark_output(net.output(layer, 0)).unwrap();
    }
    let want = kiln_cpu::CpuBackend::new().prepare(&net).expect("cpu prepare").execute(inputs).expect("cpu run");
    let got = cuda.prepare(&net).unwrap_or_else(|e| panic!("cuda prepare: {e}")).execute(inputs).unwrap_or_else(|e| panic!("cuda run: {e}"));
    Some(got.into_iter().zip(want).collect())
}

#[test]
fn casts_between_every_pair_of_types_are_bit_exact() {
    let mut r = rng(71);
    let (ints, uints) = tricky_ints();
    // Strings have no device storage (host-only, refused by every GPU backend).
    let types: Vec<DataType> = DataType::ALL.into_iter().filter(|t| !t.is_string()).collect();
    for &from in &types {
        // Random bytes of `from`, and the tricky values converted to `from` (by each backend).
        let inputs = vec![random_bytes(&mut r, from, 512), tricky_f64(), ints.clone(), uints.clone()];
        let mut layers = Vec::new();
        for &to in &types {
            layers.push((LayerKind::Cast { to }, vec![0]));
        }
        for src in 1..4 {
            layers.push((LayerKind::Cast { to: from }, vec![src]));
        }
        let Some(outs) = run_both(&inputs, &layers) else { return };
        for (k, (got, want)) in outs.iter().enumerate() {
            let what = match types.get(k) {
                Some(to) => format!("cast {from} -> {to}"),
                None => format!("cast {} -> {from}", inputs[k - types.len() + 1].dtype()),
            };
            assert_same(&what, got, want);
        }
    }
}

#[test]
fn cast_narrow_saturates_or_overflows_like_the_oracle() {
    let mut r = rng(72);
    let narrow = [DataType::F8E4M3FN, DataType::F8E4M3FNUZ, DataType::F8E5M2, DataType::F8E5M2FNUZ, DataType::F8E8M0, DataType::F4E2M1];
    for from in [DataType::F32, DataType::F16, DataType::BF16, DataType::F64] {
        let inputs = vec![random_bytes(&mut r, from, 512), tricky_f64()];
        let mut layers = Vec::new();
        for to in narrow {
            for saturate in [true, false] {
                for e8m0_rounding in [E8M0Rounding::Up, E8M0Rounding::Down, E8M0Rounding::Nearest] {
                    for src in 0..2 {
                        layers.push((LayerKind::CastNarrow { to, saturate, e8m0_rounding }, vec![src]));
                    }
                }
            }
        }
        let Some(outs) = run_both(&inputs, &layers) else { return };
        for ((got, want), (kind, slots)) in outs.iter().zip(&layers) {
            assert_same(&format!("{kind:?} of input {} ({from})", slots[0]), got, want);
        }
    }
}

const INT_TYPES: [DataType; 8] =
    [DataType::I8, DataType::I16, DataType::I32, DataType::I64, DataType::U8, DataType::U16, DataType::U32, DataType::U64];

/// `b` for `op`: nonzero divisors, small exponents and shift amounts (with a few out of range).
fn operand_for(r: &mut ChaCha8Rng, op: ElementwiseOp, dtype: DataType, n: usize) -> HostTensor {
    use ElementwiseOp as E;
    let bits = dtype.size_bytes().expect("fixed-size type") as i64 * 8;
    let signed = matches!(dtype, DataType::I8 | DataType::I16 | DataType::I32 | DataType::I64);
    let v: Vec<f64> = match op {
        E::ShiftLeft | E::ShiftRight => (0..n).map(|_| r.gen_range(0..bits + 3) as f64).collect(),
        E::Pow => (0..n).map(|_| r.gen_range(if signed { -2 } else { 0 }..6) as f64).collect(),
        _ => return random_bytes(r, dtype, n),
    };
    let t = HostTensor::new(vec![n], TensorData::F64(v)).unwrap();
    // Small integers: the low bytes of the i64 are the value in every integer type.
    small_ints(&t, dtype)
}

fn small_ints(t: &HostTensor, to: DataType) -> HostTensor {
    let v: Vec<i64> = t.to_f64_vec().iter().map(|&x| x as i64).collect();
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()[..to.size_bytes().expect("fixed-size type")].to_vec()).collect();
    HostTensor::new(t.shape().to_vec(), TensorData::from_le_bytes(to, &bytes).unwrap()).unwrap()
}

#[test]
fn integer_and_f64_elementwise_ops_are_bit_exact() {
    use ElementwiseOp as E;
    let mut r = rng(73);
    let n = 300;
    for dtype in INT_TYPES.into_iter().chain([DataType::F64]) {
        let mut ops = vec![E::Sum, E::Sub, E::Prod, E::Max, E::Min, E::Equal, E::Greater, E::Less, E::GreaterOrEqual, E::LessOrEqual, E::Pow];
        ops.extend([E::Div, E::FloorDiv, E::Mod, E::Fmod]);
        if dtype != DataType::F64 {
            ops.extend([E::BitAnd, E::BitOr, E::BitXor, E::ShiftLeft, E::ShiftRight]);
        }
        let a = random_bytes(&mut r, dtype, n);
        for op in ops {
            let mut b = operand_for(&mut r, op, dtype, n);
            if dtype != DataType::F64 && matches!(op, E::Div | E::FloorDiv | E::Mod | E::Fmod) {
                // No zero divisors here (a separate test checks the error): zero becomes one.
                let bytes = b.data().to_le_bytes();
                let w = dtype.size_bytes().expect("fixed-size type");
                let fixed: Vec<u8> = bytes.chunks(w).flat_map(|c| if c.iter().all(|&x| x == 0) { let mut o = vec![0u8; w]; o[0] = 1; o } else { c.to_vec() }).collect();
                b = HostTensor::new(vec![n], TensorData::from_le_bytes(dtype, &fixed).unwrap()).unwrap();
            }
            if dtype == DataType::F64 && op == E::Pow {
                b = HostTensor::new(vec![n], TensorData::F64((0..n).map(|_| r.gen_range(-3.0..3.0)).collect())).unwrap();
            }
            let Some(outs) = run_both(&[a.clone(), b.clone()], &[(LayerKind::Elementwise { op }, vec![0, 1])]) else { return };
            let (got, want) = &outs[0];
            if dtype == DataType::F64 && op == E::Pow {
                assert_close(&format!("{op:?} on {dtype}"), got, want, 1e-14);
            } else {
                assert_same(&format!("{op:?} on {dtype}"), got, want);
            }
        }
    }
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let Some(cuda) = backend() else { return };
    let a = HostTensor::new(vec![3], TensorData::I32(vec![1, 2, 3])).unwrap();
    let b = HostTensor::new(vec![3], TensorData::I32(vec![1, 0, 3])).unwrap();
    let mut net = Network::new("div0");
    let x = net.add_input("a", DataType::I32, Shape::fixed(&[3])).unwrap();
    let y = net.add_input("b", DataType::I32, Shape::fixed(&[3])).unwrap();
    let l = net.add_layer("div", LayerKind::Elementwise { op: ElementwiseOp::Div }, vec![Some(x), Some(y)]).unwrap();
    net.mark_output(net.output(l, 0)).unwrap();
    let err = cuda.prepare(&net).expect("prepare").execute(&[a, b]).expect_err("division by zero must fail");
    assert!(err.to_string().contains("division by zero"), "{err}");
}

#[test]
fn integer_f64_and_bool_unary_ops_match() {
    let mut r = rng(74);
    for dtype in INT_TYPES {
        let x = random_bytes(&mut r, dtype, 400);
        let layers: Vec<_> = [UnaryOp::Abs, UnaryOp::Neg, UnaryOp::Sign, UnaryOp::Not].into_iter().map(|op| (LayerKind::Unary { op }, vec![0])).collect();
        let Some(outs) = run_both(&[x], &layers) else { return };
        for ((got, want), (kind, _)) in outs.iter().zip(&layers) {
            assert_same(&format!("{kind:?} on {dtype}"), got, want);
        }
    }
    let b = random_bytes(&mut r, DataType::Bool, 100);
    let Some(outs) = run_both(&[b], &[(LayerKind::Unary { op: UnaryOp::Not }, vec![0])]) else { return };
    assert_same("Not on bool", &outs[0].0, &outs[0].1);

    let v: Vec<f64> = (0..400).map(|_| r.gen_range(-0.99..0.99) * 3.0).collect();
    let x = HostTensor::new(vec![400], TensorData::F64(v)).unwrap();
    use UnaryOp as U;
    let ops = [U::Exp, U::Sin, U::Cos, U::Tan, U::Atan, U::Sinh, U::Cosh, U::Asinh, U::Erf, U::Abs, U::Neg, U::Ceil, U::Floor, U::Round, U::Sign];
    let layers: Vec<_> = ops.iter().map(|&op| (LayerKind::Unary { op }, vec![0])).collect();
    let Some(outs) = run_both(&[x], &layers) else { return };
    for ((got, want), (kind, _)) in outs.iter().zip(&layers) {
        assert_close(&format!("{kind:?} on f64"), got, want, 1e-14);
    }
    for dtype in [DataType::F32, DataType::F16, DataType::BF16, DataType::F64] {
        let x = random_bytes(&mut r, dtype, 600);
        let ops = [U::IsNan, U::IsInf { detect_positive: true, detect_negative: true }, U::IsInf { detect_positive: false, detect_negative: true }];
        let layers: Vec<_> = ops.iter().map(|&op| (LayerKind::Unary { op }, vec![0])).collect();
        let Some(outs) = run_both(&[x], &layers) else { return };
        for ((got, want), (kind, _)) in outs.iter().zip(&layers) {
            assert_same(&format!("{kind:?} on {dtype}"), got, want);
        }
    }
}

#[test]
fn integer_and_f64_reductions_match() {
    let mut r = rng(75);
    let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean, ReduceOp::L1, ReduceOp::SumSquare, ReduceOp::L2];
    for dtype in INT_TYPES.into_iter().chain([DataType::F64]) {
        let x = random_bytes(&mut r, dtype, 4 * 5 * 6).into_data();
        let x = HostTensor::new(vec![4, 5, 6], x).unwrap();
        let x = if dtype == DataType::F64 {
            HostTensor::new(vec![4, 5, 6], TensorData::F64((0..120).map(|_| r.gen_range(-4.0..4.0)).collect())).unwrap()
        } else {
            x
        };
        for axes in [vec![1], vec![0, 2], vec![2]] {
            let layers: Vec<_> = ops.iter().map(|&op| (LayerKind::Reduce { op, axes: axes.clone(), keep_dims: true }, vec![0])).collect();
            let Some(outs) = run_both(&[x.clone()], &layers) else { return };
            for ((got, want), (kind, _)) in outs.iter().zip(&layers) {
                // Float sums may associate differently on the device (1 ulp on f64).
                let float_sum = dtype.is_float() && !matches!(kind, LayerKind::Reduce { op: ReduceOp::Max | ReduceOp::Min, .. });
                if float_sum || matches!(kind, LayerKind::Reduce { op: ReduceOp::L2, .. }) {
                    assert_close(&format!("{kind:?} on {dtype}"), got, want, 1e-15);
                } else {
                    assert_same(&format!("{kind:?} on {dtype}"), got, want);
                }
            }
        }
    }
}

#[test]
fn quantize_and_dequantize_match_per_tensor_axis_and_element() {
    let mut r = rng(76);
    let x: Vec<f32> = (0..2 * 3 * 4).map(|_| r.gen_range(-300.0..300.0)).collect();
    let x = HostTensor::new(vec![2, 3, 4], TensorData::F32(x)).unwrap();
    let scale_tensor = HostTensor::new(vec![1], TensorData::F32(vec![0.75])).unwrap();
    let scale_axis = HostTensor::new(vec![3], TensorData::F32(vec![0.5, 1.25, 3.0])).unwrap();
    let targets = [
        DataType::I8, DataType::U8, DataType::I16, DataType::U16, DataType::I32, DataType::F8E4M3FN, DataType::F8E5M2,
        DataType::F8E4M3FNUZ, DataType::I4, DataType::U4, DataType::I2, DataType::U2,
    ];
    for to in targets {
        for (scale, axis) in [(&scale_tensor, None), (&scale_axis, Some(1))] {
            let inputs = vec![x.clone(), scale.clone()];
            let layers = vec![(LayerKind::Quantize { axis, to }, vec![0, 1])];
            let Some(outs) = run_both(&inputs, &layers) else { return };
            assert_same(&format!("Quantize to {to}, axis {axis:?}"), &outs[0].0, &outs[0].1);
        }
    }
    for from in [DataType::I8, DataType::U8, DataType::I32, DataType::I4, DataType::U4, DataType::F8E4M3FN, DataType::F8E5M2] {
        let q = random_bytes(&mut r, from, 24).into_data();
        let q = HostTensor::new(vec![2, 3, 4], q).unwrap();
        let zp = random_bytes(&mut r, from, 3).into_data();
        let zp = HostTensor::new(vec![3], zp).unwrap();
        let mut inputs = vec![q, scale_axis.clone(), scale_tensor.clone()];
        // `to`: the value in the scale's type, then rounded as a Cast rounds it.
        let mut layers = vec![
            (LayerKind::Dequantize { axis: Some(1), to: None }, vec![0, 1]),
            (LayerKind::Dequantize { axis: None, to: None }, vec![0, 2]),
            (LayerKind::Dequantize { axis: Some(1), to: Some(DataType::F16) }, vec![0, 1]),
            (LayerKind::Dequantize { axis: None, to: Some(DataType::BF16) }, vec![0, 2]),
        ];
        if !from.is_narrow_float() {
            inputs.push(zp);
            layers.push((LayerKind::Dequantize { axis: Some(1), to: None }, vec![0, 1, 3]));
        }
        let Some(outs) = run_both(&inputs, &layers) else { return };
        for ((got, want), (kind, slots)) in outs.iter().zip(&layers) {
            assert_same(&format!("{kind:?} from {from} (inputs {slots:?})"), got, want);
        }
    }
}

/// f32 values as an f32, f16 or bf16 tensor of `shape`.
fn floats_as(dtype: DataType, v: Vec<f32>, shape: Vec<usize>) -> HostTensor {
    let data = match dtype {
        DataType::F16 => TensorData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
        DataType::BF16 => TensorData::BF16(v.iter().map(|&x| half::bf16::from_f32(x)).collect()),
        _ => TensorData::F32(v),
    };
    HostTensor::new(shape, data).unwrap()
}

/// One scale for every element runs four elements per thread (`quant_*_8bit_x4`) where the
/// length is a multiple of 4, and one at a time otherwise: both give the oracle's bytes, from
/// f32, f16 and bf16 with a zero point, at rounding ties and past saturation.
#[test]
fn per_tensor_8bit_quantize_and_dequantize_match_with_and_without_vectors() {
    let mut r = rng(78);
    // 4100: an odd count of four-element vectors, so some threads of the two-vector loop get one.
    for len in [4096, 4099, 4100] {
        for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
            // Multiples of scale / 2 land on ties; the range passes both saturation bounds; NaN
            // saturates to 0 and the infinities to the bounds.
            let mut values: Vec<f32> = (0..len).map(|i| if i % 3 == 0 { (r.gen_range(-400i32..400) as f32) * 0.25 } else { r.gen_range(-90.0..90.0) }).collect();
            values[5..8].copy_from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            let as_dtype = |v: Vec<f32>, shape: Vec<usize>| floats_as(dtype, v, shape);
            let x = as_dtype(values, vec![len]);
            let scale = as_dtype(vec![0.5], vec![]);
            for to in [DataType::I8, DataType::U8] {
                let zero = HostTensor::new(vec![], if to == DataType::I8 { TensorData::I8(vec![-3]) } else { TensorData::U8(vec![100]) }).unwrap();
                let layers = vec![(LayerKind::Quantize { axis: None, to }, vec![0, 1, 2]), (LayerKind::Quantize { axis: None, to }, vec![0, 1])];
                let Some(outs) = run_both(&[x.clone(), scale.clone(), zero.clone()], &layers) else { return };
                for ((got, want), (_, slots)) in outs.iter().zip(&layers) {
                    assert_same(&format!("Quantize {dtype} -> {to}, {len} elements (inputs {slots:?})"), got, want);
                }
                let q = random_bytes(&mut r, to, len).into_data();
                let q = HostTensor::new(vec![len], q).unwrap();
                let mut layers = vec![(LayerKind::Dequantize { axis: None, to: None }, vec![0, 1, 2]), (LayerKind::Dequantize { axis: None, to: None }, vec![0, 1])];
                if dtype == DataType::F32 {
                    // Written narrower than the scale: the four-a-thread kernel stores f16 / bf16.
                    layers.push((LayerKind::Dequantize { axis: None, to: Some(DataType::F16) }, vec![0, 1, 2]));
                    layers.push((LayerKind::Dequantize { axis: None, to: Some(DataType::BF16) }, vec![0, 1]));
                }
                let Some(outs) = run_both(&[q, scale.clone(), zero], &layers) else { return };
                for ((got, want), (_, slots)) in outs.iter().zip(&layers) {
                    assert_same(&format!("Dequantize {to} -> {dtype}, {len} elements (inputs {slots:?})"), got, want);
                }
            }
        }
    }
}

/// The 8-bit per-tensor Quantize multiplies by the scale's reciprocal and divides only near a
/// rounding tie (common.cuh's rounded_ratio): every f16 value, and f32 values a few units in
/// the last place around every tie, give the oracle's (dividing) bytes for scales whose
/// reciprocal is inexact, including one whose significand is all ones.
#[test]
fn per_tensor_8bit_quantize_matches_the_dividing_oracle_at_every_f16_value_and_around_every_tie() {
    let every_f16: Vec<f32> = (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()).collect();
    for s in [0.023f32, 1.0 / 127.0, 0.1, 3.0, f32::from_bits(0x3f7f_ffff), f32::from_bits(0x3c23_d70b)] {
        let mut near_ties = Vec::new();
        for k in -140i32..140 {
            let tie = (k as f32 + 0.5) * s;
            for d in -3i32..=3 {
                near_ties.push(f32::from_bits((tie.to_bits() as i32 + d) as u32));
            }
        }
        near_ties.resize(near_ties.len().next_multiple_of(16), 0.0);
        for (dtype, values) in [(DataType::F16, every_f16.clone()), (DataType::F32, near_ties)] {
            let len = values.len();
            let x = floats_as(dtype, values, vec![len]);
            let scale = floats_as(dtype, vec![s], vec![]);
            for (to, zero) in [(DataType::I8, TensorData::I8(vec![-3])), (DataType::U8, TensorData::U8(vec![128]))] {
                let zero = HostTensor::new(vec![], zero).unwrap();
                let layers = vec![(LayerKind::Quantize { axis: None, to }, vec![0, 1, 2])];
                let Some(outs) = run_both(&[x.clone(), scale.clone(), zero], &layers) else { return };
                assert_same(&format!("Quantize {len} {dtype} values -> {to}, scale {s:e}"), &outs[0].0, &outs[0].1);
            }
        }
    }
}

/// Quantize to float8 with one scale runs four elements per thread (`quant_quantize_narrow_x4`)
/// where the length is a multiple of 4: the oracle's bytes from f32, f16 and bf16, with and
/// without a zero point, at -0, in the subnormals, past saturation, NaN and the infinities.
#[test]
fn per_tensor_float8_quantize_matches_with_and_without_vectors() {
    let mut r = rng(79);
    for len in [4096, 4099] {
        for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
            let mut values: Vec<f32> = (0..len).map(|i| match i % 4 { 0 => r.gen_range(-1e5..1e5), 1 => r.gen_range(-1e-2..1e-2), _ => r.gen_range(-500.0..500.0) }).collect();
            values[5..10].copy_from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0]);
            let as_dtype = |v: Vec<f32>, shape: Vec<usize>| floats_as(dtype, v, shape);
            let x = as_dtype(values, vec![len]);
            let scale = as_dtype(vec![0.75], vec![]);
            for to in [DataType::F8E4M3FN, DataType::F8E4M3FNUZ, DataType::F8E5M2, DataType::F8E5M2FNUZ] {
                // float8's zero point can only be 0 (its +0 code).
                let zero = HostTensor::zeros(to, vec![]);
                let layers = vec![(LayerKind::Quantize { axis: None, to }, vec![0, 1, 2]), (LayerKind::Quantize { axis: None, to }, vec![0, 1])];
                let Some(outs) = run_both(&[x.clone(), scale.clone(), zero], &layers) else { return };
                for ((got, want), (_, slots)) in outs.iter().zip(&layers) {
                    assert_same(&format!("Quantize {dtype} -> {to}, {len} elements (inputs {slots:?})"), got, want);
                }
            }
        }
    }
}

#[test]
fn bit_cast_reinterprets_bytes() {
    let mut r = rng(77);
    for (from, to) in [(DataType::F32, DataType::I32), (DataType::U16, DataType::F16), (DataType::I8, DataType::U8), (DataType::F64, DataType::U64)] {
        let x = random_bytes(&mut r, from, 64);
        let Some(outs) = run_both(&[x], &[(LayerKind::BitCast { to }, vec![0])]) else { return };
        assert_same(&format!("BitCast {from} -> {to}"), &outs[0].0, &outs[0].1);
    }
}
