//! Gather (default, elements, ND with batch dims) and Scatter (elements, ND, reductions).

use crate::common::*;
use kiln::{DataType, GatherMode, HostTensor, LayerKind, ScatterMode, ScatterReduction as Red};

fn gather(mode: GatherMode, data: HostTensor, indices: HostTensor) -> HostTensor {
    run1(LayerKind::Gather { mode }, vec![In::Run(data), In::Run(indices)])
}

#[test]
fn gather_rows_and_columns_with_negative_indices() {
    let data = f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = gather(GatherMode::Default { axis: 0 }, data.clone(), i64s(&[2, 2], &[0, -1, 1, 2]));
    assert_close(&y, DataType::F32, &[2, 2, 2], &[1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    let y = gather(GatherMode::Default { axis: 1 }, data.clone(), i32s(&[], &[-2]));
    assert_close(&y, DataType::F32, &[3], &[1.0, 3.0, 5.0], 0.0);
    let y = gather(GatherMode::Default { axis: 0 }, data, i64s(&[0], &[]));
    assert_close(&y, DataType::F32, &[0, 2], &[], 0.0);
}

#[test]
fn gather_out_of_range_is_an_execution_error() {
    for index in [2, -3] {
        let reason = run_err(
            LayerKind::Gather { mode: GatherMode::Default { axis: 1 } },
            vec![In::Run(i32s(&[1, 2], &[1, 2])), In::Run(i64s(&[1], &[index]))],
        );
        assert!(reason.contains("out of range"), "{reason}");
    }
}

#[test]
fn gather_elements_picks_along_an_axis() {
    let data = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let y = gather(GatherMode::Elements { axis: 1 }, data.clone(), i64s(&[2, 2], &[2, 0, -1, 1]));
    assert_exact(&y, &i32s(&[2, 2], &[3, 1, 6, 5]));
    let y = gather(GatherMode::Elements { axis: 0 }, data, i64s(&[1, 3], &[1, 0, 1]));
    assert_exact(&y, &i32s(&[1, 3], &[4, 2, 6]));
}

#[test]
fn gather_nd_with_and_without_batch_dims() {
    let data = i64s(&[2, 2], &[0, 1, 2, 3]);
    assert_exact(
        &gather(GatherMode::Nd { batch_dims: 0 }, data.clone(), i64s(&[2, 2], &[0, 0, 1, 1])),
        &i64s(&[2], &[0, 3]),
    );
    assert_exact(
        &gather(GatherMode::Nd { batch_dims: 0 }, data, i64s(&[2, 1], &[1, 0])),
        &i64s(&[2, 2], &[2, 3, 0, 1]),
    );
    // ONNX GatherND example 5: batch_dims = 1.
    let data = i64s(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]);
    let y = gather(GatherMode::Nd { batch_dims: 1 }, data, i64s(&[2, 1], &[1, 0]));
    assert_exact(&y, &i64s(&[2, 2], &[2, 3, 4, 5]));
}

fn scatter(
    mode: ScatterMode,
    reduction: Red,
    data: HostTensor,
    indices: HostTensor,
    updates: HostTensor,
) -> HostTensor {
    run1(LayerKind::Scatter { mode, reduction }, vec![In::Run(data), In::Run(indices), In::Run(updates)])
}

#[test]
fn scatter_elements_with_each_reduction() {
    let data = || f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let idx = || i64s(&[1, 2], &[1, -2]);
    let upd = || f32s(&[1, 2], &[1.1, 2.1]);
    let e = |r| scatter(ScatterMode::Elements { axis: 1 }, r, data(), idx(), upd());
    assert_close(&e(Red::None), DataType::F32, &[1, 5], &[1.0, 1.1, 3.0, 2.1, 5.0], 1e-7);
    assert_close(&e(Red::Add), DataType::F32, &[1, 5], &[1.0, 3.1, 3.0, 6.1, 5.0], 1e-7);
    assert_close(&e(Red::Mul), DataType::F32, &[1, 5], &[1.0, 2.2, 3.0, 8.4, 5.0], 1e-6);
    assert_close(&e(Red::Max), DataType::F32, &[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
    assert_close(&e(Red::Min), DataType::F32, &[1, 5], &[1.0, 1.1, 3.0, 2.1, 5.0], 1e-7);
    // Duplicate indices accumulate in order.
    let y = scatter(
        ScatterMode::Elements { axis: 0 },
        Red::Add,
        i32s(&[3], &[0, 0, 0]),
        i64s(&[3], &[1, 1, 2]),
        i32s(&[3], &[5, 6, 7]),
    );
    assert_exact(&y, &i32s(&[3], &[0, 11, 7]));
}

#[test]
fn scatter_nd_writes_slices() {
    // ONNX ScatterND example 1.
    let y = scatter(
        ScatterMode::Nd,
        Red::None,
        i32s(&[8], &[1, 2, 3, 4, 5, 6, 7, 8]),
        i64s(&[4, 1], &[4, 3, 1, 7]),
        i32s(&[4], &[9, 10, 11, 12]),
    );
    assert_exact(&y, &i32s(&[8], &[1, 11, 3, 10, 9, 6, 7, 12]));
    let y = scatter(
        ScatterMode::Nd,
        Red::Mul,
        f64s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
        i64s(&[1, 1], &[-1]),
        f64s(&[1, 2], &[10.0, 0.5]),
    );
    assert_close(&y, DataType::F64, &[2, 2], &[1.0, 2.0, 30.0, 2.0], 0.0);
    let y = scatter(ScatterMode::Nd, Red::Add, bools(&[2], &[false, true]), i64s(&[1, 1], &[0]), bools(&[1], &[true]));
    assert_exact(&y, &bools(&[2], &[true, true]));
}

#[test]
fn scatter_rejects_bad_indices_and_update_shapes() {
    let kind = LayerKind::Scatter { mode: ScatterMode::Nd, reduction: Red::None };
    let reason = run_err(
        kind.clone(),
        vec![In::Run(i32s(&[2], &[0, 0])), In::Run(i64s(&[1, 1], &[2])), In::Run(i32s(&[1], &[1]))],
    );
    assert!(reason.contains("out of range"), "{reason}");
    let reason =
        run_err(kind, vec![In::Run(i32s(&[2], &[0, 0])), In::Run(i64s(&[1, 1], &[0])), In::Run(i32s(&[2], &[1, 1]))]);
    assert!(reason.contains("updates"), "{reason}");
}
