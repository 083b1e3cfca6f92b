//! Scatter (Elements and ND, every reduction, duplicate indices), GatherND, OneHot and
//! reflect / edge / wrap Padding.

use crate::common::*;
use kiln::{DataType, GatherMode, HostTensor, LayerKind, PaddingMode, ScatterMode, ScatterReduction, TensorData};

const REDUCTIONS: [ScatterReduction; 5] = [
    ScatterReduction::None,
    ScatterReduction::Add,
    ScatterReduction::Mul,
    ScatterReduction::Max,
    ScatterReduction::Min,
];

#[test]
fn scatter_elements_every_reduction_with_duplicates() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(70);
    // Indices along axis 1 (length 5) with repeats and negatives; 6 updates per line.
    let idx = cast(&rand_i32(&mut r, &[3, 6, 2], -5, 5), DataType::I64);
    for dtype in [DataType::F32, DataType::I32, DataType::I16, DataType::Bool] {
        let (data, upd) = if dtype == DataType::Bool {
            (rand_bool(&mut r, &[4, 5, 3]), rand_bool(&mut r, &[3, 6, 2]))
        } else {
            let f = |t: HostTensor| cast(&t, dtype);
            (f(rand_f32(&mut r, &[4, 5, 3], -3.0, 3.0)), f(rand_f32(&mut r, &[3, 6, 2], -3.0, 3.0)))
        };
        for reduction in REDUCTIONS {
            let kind = LayerKind::Scatter { mode: ScatterMode::Elements { axis: 1 }, reduction };
            let ins = vec![In::Run(data.clone()), In::Const(idx.clone()), In::Run(upd.clone())];
            check(&gpu, kind, ins, &format!("ScatterElements {dtype} {reduction:?}"));
        }
    }
}

#[test]
fn scatter_nd_every_reduction_with_duplicates() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(71);
    let data = rand_f32(&mut r, &[4, 3, 5], -2.0, 2.0);
    // Whole rows (tuple of 1, repeated rows) and single elements (tuple of 3).
    let rows = i64s(&[6, 1], &[0, 2, -1, 2, 0, 2]);
    let rows_upd = rand_f32(&mut r, &[6, 3, 5], -2.0, 2.0);
    let cells = i64s(&[2, 2, 3], &[0, 1, 2, 3, 2, 4, 0, 1, 2, -1, 0, 0]);
    let cells_upd = rand_f32(&mut r, &[2, 2], -2.0, 2.0);
    for reduction in REDUCTIONS {
        for (what, idx, upd) in [("rows", &rows, &rows_upd), ("cells", &cells, &cells_upd)] {
            for dtype in [DataType::F32, DataType::I32] {
                let kind = LayerKind::Scatter { mode: ScatterMode::Nd, reduction };
                let ins = vec![In::Run(cast(&data, dtype)), In::Const(idx.clone()), In::Run(cast(upd, dtype))];
                check(&gpu, kind, ins, &format!("ScatterND {what} {dtype} {reduction:?}"));
            }
        }
    }
}

#[test]
fn gather_nd_with_batch_dims() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(72);
    let data = rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0);
    let cases = [
        (0, i64s(&[3, 2], &[0, 1, 1, -1, 0, 0])),
        (0, i64s(&[2, 2, 3], &[0, 0, 0, 1, 2, 3, 1, -1, 1, 0, 2, 0])),
        (1, i64s(&[2, 2, 1], &[2, 0, -1, 1])),
    ];
    for (batch_dims, idx) in cases {
        let kind = LayerKind::Gather { mode: GatherMode::Nd { batch_dims } };
        let shape = idx.shape().to_vec();
        check(&gpu, kind, vec![In::Run(data.clone()), In::Run(idx)], &format!("GatherND {shape:?} b{batch_dims}"));
    }
    let ints = rand_i32(&mut r, &[2, 3, 4], -9, 9);
    let kind = LayerKind::Gather { mode: GatherMode::Nd { batch_dims: 0 } };
    check(&gpu, kind, vec![In::Run(ints), In::Const(i64s(&[2, 1], &[1, 0]))], "GatherND i32");
}

#[test]
fn one_hot_wraps_negatives_and_drops_out_of_range() {
    let Some(gpu) = gpu() else { return };
    let idx = i64s(&[2, 3], &[0, -1, 4, 9, -6, 2]);
    let depth = HostTensor::new(vec![], TensorData::I64(vec![5])).expect("depth");
    for axis in [-1, 0, 1] {
        for (what, values) in
            [("f32", HostTensor::from_f32(vec![2], vec![-1.5, 3.0]).expect("values")), ("i64", i64s(&[2], &[0, 7]))]
        {
            let ins = vec![In::Run(idx.clone()), In::Const(values), In::Const(depth.clone())];
            check(&gpu, LayerKind::OneHot { axis }, ins, &format!("OneHot {what} axis {axis}"));
        }
    }
}

#[test]
fn padding_reflect_edge_wrap() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(73);
    let x = rand_f32(&mut r, &[3, 4, 5], -1.0, 1.0);
    let ints = rand_i32(&mut r, &[3, 4, 5], -9, 9);
    let pads: [&[i64]; 3] = [&[0, 2, 3, 1, 1, 2], &[1, 0, 7, 0, 3, 0], &[0, -1, 2, 2, 1, -2]];
    for mode in [PaddingMode::Reflect, PaddingMode::Edge, PaddingMode::Wrap] {
        for p in pads {
            for (what, t) in [("f32", &x), ("i32", &ints)] {
                let ins = vec![In::Run(t.clone()), In::Const(i64s(&[6], p))];
                check(&gpu, LayerKind::Padding { mode }, ins, &format!("{mode:?} pads {p:?} {what}"));
            }
        }
    }
}
