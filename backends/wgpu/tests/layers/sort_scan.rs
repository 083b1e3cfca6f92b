//! TopK (ties, NaN, every storage), CumulativeSum / CumulativeProduct (exclusive,
//! reverse, negative axis, wrapping integers), LRN and Einsum.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind, TensorData};

/// f32 values with many ties (small integers) and, where `nan`, a few NaNs.
fn tied_f32(r: &mut rand_chacha::ChaCha8Rng, shape: &[usize], nan: bool) -> HostTensor {
    let ints = rand_i32(r, shape, -4, 4);
    let Some(v) = ints.to_i64_vec() else { panic!("ints") };
    let v = v.iter().enumerate().map(|(i, &x)| if nan && i % 11 == 3 { f32::NAN } else { x as f32 * 0.5 }).collect();
    HostTensor::from_f32(shape.to_vec(), v).expect("shape")
}

#[test]
fn top_k_orders_ties_by_index_like_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(60);
    let inputs = [
        ("f32 with ties", tied_f32(&mut r, &[3, 17, 4], false)),
        ("f32 with NaN", tied_f32(&mut r, &[3, 17, 4], true)),
        ("i32", rand_i32(&mut r, &[3, 17, 4], -3, 3)),
        ("u8", cast(&rand_i32(&mut r, &[3, 17, 4], 0, 5), DataType::U8)),
        ("i64", cast(&rand_i32(&mut r, &[3, 17, 4], -100, 100), DataType::I64)),
    ];
    for (what, x) in &inputs {
        for (axis, k) in [(1, 5), (1, 17), (2, 1), (0, 2)] {
            for largest in [true, false] {
                let kind = LayerKind::TopK { largest, axis, sorted: true };
                let ins = vec![In::Run(x.clone()), In::Const(i64s(&[1], &[k]))];
                check(&gpu, kind, ins, &format!("TopK {what} axis {axis} k {k} largest {largest}"));
            }
        }
    }
    // k as a run-time input (read back for inference), a long row.
    let x = rand_f32(&mut r, &[2, 700], -1.0, 1.0);
    let kind = LayerKind::TopK { largest: true, axis: 1, sorted: true };
    check(&gpu, kind, vec![In::Run(x), In::Run(i64s(&[1], &[9]))], "TopK run-time k");
}

#[test]
fn cumulative_sum_and_product_every_mode() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(61);
    let f = rand_f32(&mut r, &[3, 5, 4], 0.5, 1.5);
    let i = rand_i32(&mut r, &[3, 5, 4], -50, 50);
    let narrow = cast(&rand_i32(&mut r, &[3, 5, 4], -100, 100), DataType::I8);
    for (what, x) in [("f32", &f), ("i32", &i), ("i8 wrapping", &narrow)] {
        for axis in [0i64, 1, -1] {
            for exclusive in [false, true] {
                for reverse in [false, true] {
                    let axis_t = HostTensor::new(vec![], TensorData::I64(vec![axis])).expect("axis");
                    let ins = || vec![In::Run(x.clone()), In::Const(axis_t.clone())];
                    let tag = format!("{what} axis {axis} exclusive {exclusive} reverse {reverse}");
                    check(&gpu, LayerKind::CumulativeSum { exclusive, reverse }, ins(), &format!("CumSum {tag}"));
                    check(&gpu, LayerKind::CumulativeProduct { exclusive, reverse }, ins(), &format!("CumProd {tag}"));
                }
            }
        }
    }
}

#[test]
fn lrn_matches_cpu() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(62);
    let x = rand_f32(&mut r, &[2, 7, 3, 3], -2.0, 2.0);
    for (window, alpha, beta, k) in [(3, 1e-4, 0.75, 1.0), (4, 0.02, 0.5, 2.0), (1, 0.1, 1.0, 1.0)] {
        let kind = LayerKind::Lrn { window, alpha, beta, k };
        check(&gpu, kind, vec![In::Run(x.clone())], &format!("LRN window {window}"));
    }
}

#[test]
fn einsum_one_and_two_operands() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(63);
    let a = rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0);
    let b = rand_f32(&mut r, &[2, 4, 5], -1.0, 1.0);
    let sq = rand_f32(&mut r, &[2, 3, 3], -1.0, 1.0);
    let v = rand_f32(&mut r, &[4], -1.0, 1.0);
    let cases: Vec<(&str, Vec<&HostTensor>)> = vec![
        ("bij,bjk->bik", vec![&a, &b]),
        ("...ij,...jk", vec![&a, &b]),
        ("bij->bji", vec![&a]),
        ("bii->bi", vec![&sq]),
        ("bii", vec![&sq]),
        ("bij->", vec![&a]),
        ("i,i", vec![&v, &v]),
        ("bij,j->bi", vec![&a, &v]),
    ];
    for (equation, operands) in cases {
        let ins = operands.into_iter().map(|t| In::Run(t.clone())).collect();
        check(&gpu, LayerKind::Einsum { equation: equation.into() }, ins, &format!("Einsum {equation}"));
    }
    let i = rand_i32(&mut r, &[3, 4], -5, 5);
    let j = rand_i32(&mut r, &[4, 2], -5, 5);
    let ins = vec![In::Run(i), In::Run(j)];
    check(&gpu, LayerKind::Einsum { equation: "ij,jk->ik".into() }, ins, "Einsum i32");
}
