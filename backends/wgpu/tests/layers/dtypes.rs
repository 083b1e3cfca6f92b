//! The element types the device stores narrowed or decoded (float8, float4, 4/2-bit
//! integers, f64, u64): Cast round trips against the cpu backend, bit-exact for the
//! storage-only types on edge values (NaN, ±Inf, largest finite, subnormals, ties).

use crate::common::*;
use kiln::{Backend, BackendError, DataType, E8M0Rounding, ElementwiseOp, HostTensor, LayerKind, TensorData};

const NARROW_FLOATS: [DataType; 6] = [
    DataType::F8E4M3FN,
    DataType::F8E4M3FNUZ,
    DataType::F8E5M2,
    DataType::F8E5M2FNUZ,
    DataType::F8E8M0,
    DataType::F4E2M1,
];

const NARROW_INTS: [DataType; 4] = [DataType::I4, DataType::U4, DataType::I2, DataType::U2];

/// Every code of a storage-only type (256, or 16 / 4 for the 4- / 2-bit ones), as a tensor.
fn all_codes(dtype: DataType) -> HostTensor {
    let count = dtype.packed_bits().map_or(256, |bits| 1 << bits);
    let bytes: Vec<u8> = (0..count).map(|c| c as u8).collect();
    HostTensor::new(vec![count], TensorData::from_le_bytes(dtype, &bytes).expect("codes")).expect("shape")
}

/// f32 values probing every rounding decision of a cast to the narrow float types: each
/// finite value of every type, the midpoints (ties) between neighbours and one f32 ulp
/// either side, both signs; plus NaN of both signs, infinities, zeros, f32 subnormals,
/// values far beyond every range.
fn edge_values() -> HostTensor {
    let mut v: Vec<f32> = vec![
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x0040_0000),
        f32::MAX,
        1e30,
        65504.0,
        57344.0,
        61440.0,
        61439.996,
        448.0,
        464.0,
        480.0,
        240.0,
        248.0,
        6.0,
        7.0,
        0.25,
        2f32.powi(127),
        2f32.powi(126) * 1.5,
    ];
    for dtype in NARROW_FLOATS {
        let codes = all_codes(dtype).to_f64_vec();
        let mut finite: Vec<f32> = codes.iter().map(|&c| c as f32).filter(|c| c.is_finite() && *c >= 0.0).collect();
        finite.sort_by(f32::total_cmp);
        finite.dedup();
        for pair in finite.windows(2) {
            let mid = (pair[0] + pair[1]) / 2.0;
            v.extend([pair[0], mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)]);
        }
        if let Some(&top) = finite.last() {
            v.extend([top, top * 1.0625, top * 1.125, top * 1.25, top * 2.0]);
        }
    }
    let negatives: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(negatives);
    HostTensor::from_f32(vec![v.len()], v).expect("shape")
}

fn run_cast(gpu: &kiln_wgpu::WgpuBackend, kind: LayerKind, x: &HostTensor, what: &str) {
    check(gpu, kind, vec![In::Run(x.clone())], what);
}

#[test]
fn casts_into_float8_and_float4_round_bit_exactly() {
    let Some(gpu) = gpu() else { return };
    let x = edge_values();
    for to in NARROW_FLOATS {
        run_cast(&gpu, LayerKind::Cast { to }, &x, &format!("f32 -> {to}"));
        for saturate in [true, false] {
            for e8m0_rounding in [E8M0Rounding::Up, E8M0Rounding::Down, E8M0Rounding::Nearest] {
                let kind = LayerKind::CastNarrow { to, saturate, e8m0_rounding };
                run_cast(&gpu, kind, &x, &format!("f32 -> {to} saturate={saturate} {e8m0_rounding:?}"));
            }
        }
    }
    // Integer sources go through f32 (exact below 2^24, and far beyond every range above).
    let ints = HostTensor::new(
        vec![12],
        TensorData::I32(vec![0, 1, -1, 7, 17, 300, 449, -465, 57344, 61440, 1 << 24, i32::MIN]),
    )
    .expect("shape");
    for to in NARROW_FLOATS {
        run_cast(&gpu, LayerKind::Cast { to }, &ints, &format!("i32 -> {to}"));
    }
}

#[test]
fn every_code_moves_and_converts_like_the_cpu() {
    let Some(gpu) = gpu() else { return };
    for from in NARROW_FLOATS.into_iter().chain(NARROW_INTS) {
        let x = all_codes(from);
        // Upload and read back (Identity), including every NaN code.
        run_cast(&gpu, LayerKind::Identity, &x, &format!("{from} identity"));
        for to in [DataType::F32, DataType::F16, DataType::I32, DataType::U8, DataType::Bool, DataType::F64, from] {
            run_cast(&gpu, LayerKind::Cast { to }, &x, &format!("{from} -> {to}"));
        }
        for to in NARROW_FLOATS.into_iter().chain(NARROW_INTS) {
            run_cast(&gpu, LayerKind::Cast { to }, &x, &format!("{from} -> {to}"));
        }
    }
}

#[test]
fn casts_into_4_and_2_bit_integers_wrap_like_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let x = HostTensor::from_f32(
        vec![22],
        vec![
            0.0,
            -0.0,
            0.9,
            -0.9,
            1.5,
            -1.5,
            7.9,
            8.0,
            -8.5,
            15.99,
            16.0,
            -17.2,
            1e9,
            -1e9,
            2147483648.0,
            -2147483648.0,
            1e38,
            -1e38,
            f32::MAX,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ],
    )
    .expect("shape");
    let ints = HostTensor::new(vec![9], TensorData::I32(vec![0, 1, -1, 7, 8, -8, -9, 255, i32::MIN])).expect("shape");
    let unsigned = HostTensor::new(vec![5], TensorData::U32(vec![0, 3, 4, 17, u32::MAX])).expect("shape");
    for to in NARROW_INTS {
        run_cast(&gpu, LayerKind::Cast { to }, &x, &format!("f32 -> {to}"));
        run_cast(&gpu, LayerKind::Cast { to }, &ints, &format!("i32 -> {to}"));
        run_cast(&gpu, LayerKind::Cast { to }, &unsigned, &format!("u32 -> {to}"));
    }
}

#[test]
fn storage_only_types_move_through_select_and_gather() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(61);
    for dtype in [DataType::F8E4M3FN, DataType::F8E5M2, DataType::I4, DataType::U2] {
        let codes = all_codes(dtype);
        let n = codes.len();
        let other = cast(&rand_f32(&mut r, &[n], -4.0, 4.0), dtype);
        let cond = rand_bool(&mut r, &[n]);
        check(&gpu, LayerKind::Select, vec![In::Run(cond), In::Run(codes.clone()), In::Run(other)], "Select");
        let idx = i64s(&[3], &[n as i64 - 1, 0, (5 % n) as i64]);
        let gather = LayerKind::Gather { mode: kiln::GatherMode::Default { axis: 0 } };
        check(&gpu, gather, vec![In::Run(codes), In::Const(idx)], &format!("{dtype} Gather"));
    }
}

#[test]
fn arithmetic_on_storage_only_types_is_refused() {
    let Some(gpu) = gpu() else { return };
    let x = all_codes(DataType::F8E4M3FN);
    let (net, _) = one_layer(LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![In::Run(x.clone()), In::Run(x)]);
    match gpu.check_support(&net) {
        Err(BackendError::Unsupported { reason, .. }) => assert!(reason.contains("storage-only"), "{reason}"),
        other => panic!("f8e4m3fn Sum: expected Unsupported, got {other:?}"),
    }
}

#[test]
fn f64_is_computed_in_f32() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(62);
    let (a, b) = (rand_f32(&mut r, &[64], -3.0, 3.0), rand_f32(&mut r, &[64], -3.0, 3.0));
    let (a64, b64) = (cast(&a, DataType::F64), cast(&b, DataType::F64));
    // f32 inputs widened: exact both ways; arithmetic then differs from f64 by f32 rounding.
    run_cast(&gpu, LayerKind::Cast { to: DataType::F64 }, &a, "f32 -> f64");
    run_cast(&gpu, LayerKind::Cast { to: DataType::F32 }, &a64, "f64 -> f32");
    for op in [ElementwiseOp::Sum, ElementwiseOp::Prod, ElementwiseOp::Div] {
        let kind = LayerKind::Elementwise { op };
        check_tol(&gpu, kind, vec![In::Run(a64.clone()), In::Run(b64.clone())], 1e-6, 1e-7, &format!("f64 {op:?}"));
    }
    let reduce = LayerKind::Reduce { op: kiln::ReduceOp::Sum, axes: vec![0], keep_dims: false };
    check_tol(&gpu, reduce, vec![In::Run(a64.clone())], 1e-5, 1e-6, "f64 ReduceSum");
    // A value f32 cannot hold is rounded on upload: the documented policy.
    let fine = HostTensor::new(vec![1], TensorData::F64(vec![1.0 + 1e-12])).expect("shape");
    let (net, feeds) = one_layer(LayerKind::Identity, vec![In::Run(fine)]);
    let got = gpu.prepare(&net).expect("prepare").execute(&feeds).expect("run").remove(0);
    assert_eq!(got.to_f64_vec(), vec![1.0], "f64 is stored as f32");
}

#[test]
fn u64_is_stored_as_u32_when_it_fits() {
    let Some(gpu) = gpu() else { return };
    let x = HostTensor::new(vec![4], TensorData::U64(vec![0, 7, 1 << 31, u64::from(u32::MAX)])).expect("shape");
    for to in [DataType::F32, DataType::U8, DataType::Bool] {
        run_cast(&gpu, LayerKind::Cast { to }, &x, &format!("u64 -> {to}"));
    }
    // i64 is stored as i32: values that fit cast exactly, larger ones saturate (the
    // documented policy; the cpu keeps them).
    let fits = HostTensor::new(vec![3], TensorData::U64(vec![0, 7, i32::MAX as u64])).expect("shape");
    run_cast(&gpu, LayerKind::Cast { to: DataType::I64 }, &fits, "u64 -> i64");
    let (net, feeds) = one_layer(LayerKind::Cast { to: DataType::I64 }, vec![In::Run(x.clone())]);
    let got = gpu.prepare(&net).expect("prepare").execute(&feeds).expect("run").remove(0);
    let max = i64::from(i32::MAX);
    assert_eq!(got.to_f64_vec(), vec![0.0, 7.0, max as f64, max as f64], "u64 -> i64 beyond i32 saturates");
    run_cast(&gpu, LayerKind::Cast { to: DataType::U64 }, &rand_i32(&mut rng(63), &[16], 0, 1000), "i32 -> u64");
    let (a, b) = (x.clone(), HostTensor::new(vec![4], TensorData::U64(vec![3, 3, 3, 5])).expect("shape"));
    check(&gpu, LayerKind::Elementwise { op: ElementwiseOp::Div }, vec![In::Run(a), In::Run(b)], "u64 Div");
    let big = HostTensor::new(vec![2], TensorData::U64(vec![1, 1 << 40])).expect("shape");
    let (net, feeds) = one_layer(LayerKind::Identity, vec![In::Run(big)]);
    let err = gpu.prepare(&net).expect("prepare").execute(&feeds).expect_err("u64 beyond u32").to_string();
    assert!(err.contains("does not fit in u32"), "{err}");
}
