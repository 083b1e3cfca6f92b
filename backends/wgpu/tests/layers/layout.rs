//! Data movement: Shuffle (transpose + reshape), Slice (negative steps), Expand,
//! Concatenation, constant Padding, Gather, GatherElements, Fill-like constants.

use crate::common::*;
use kiln::{DataType, GatherMode, HostTensor, LayerKind, PaddingMode, ShuffleParams, TensorData};

#[test]
fn shuffle_transposes_and_reshapes() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(10);
    let x = rand_f32(&mut r, &[2, 3, 4, 5], -1.0, 1.0);
    let p = ShuffleParams {
        first_transpose: vec![0, 2, 3, 1],
        reshape: Some(vec![2, -1, 3]),
        second_transpose: vec![2, 0, 1],
        zero_is_placeholder: true,
    };
    check(&gpu, LayerKind::Shuffle(p), vec![In::Run(x.clone())], "shuffle");
    // A run-time reshape tensor (host shape arithmetic) and an int tensor.
    let p =
        ShuffleParams { first_transpose: vec![], reshape: None, second_transpose: vec![], zero_is_placeholder: true };
    check(&gpu, LayerKind::Shuffle(p), vec![In::Run(x), In::Const(i64s(&[2], &[6, 20]))], "reshape by tensor");
    let p = ShuffleParams {
        first_transpose: vec![1, 0],
        reshape: None,
        second_transpose: vec![],
        zero_is_placeholder: true,
    };
    check(&gpu, LayerKind::Shuffle(p), vec![In::Run(rand_i32(&mut r, &[3, 7], -9, 9))], "transpose i32");
}

#[test]
fn slice_with_steps() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(11);
    let x = rand_f32(&mut r, &[5, 6, 7], -1.0, 1.0);
    let ins = |s: &[i64], e: &[i64], a: &[i64], st: &[i64]| {
        vec![
            In::Run(x.clone()),
            In::Const(i64s(&[s.len()], s)),
            In::Const(i64s(&[e.len()], e)),
            In::Const(i64s(&[a.len()], a)),
            In::Const(i64s(&[st.len()], st)),
        ]
    };
    check(&gpu, LayerKind::Slice, ins(&[1, -1], &[4, 0], &[0, 2], &[2, -2]), "slice steps");
    check(&gpu, LayerKind::Slice, ins(&[0], &[i64::MAX], &[1], &[1]), "slice to the end");
    check(&gpu, LayerKind::Slice, ins(&[-1], &[i64::MIN], &[1], &[-1]), "slice reversed");
}

#[test]
fn expand_concat_pad() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(12);
    let x = rand_f32(&mut r, &[3, 1], -1.0, 1.0);
    check(&gpu, LayerKind::Expand, vec![In::Run(x), In::Const(i64s(&[3], &[2, 3, 4]))], "expand");
    let parts = vec![
        In::Run(rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0)),
        In::Run(rand_f32(&mut r, &[2, 1, 4], -1.0, 1.0)),
        In::Const(rand_f32(&mut r, &[2, 5, 4], -1.0, 1.0)),
    ];
    check(&gpu, LayerKind::Concatenation { axis: 1 }, parts, "concat axis 1");
    let parts = vec![In::Run(rand_i32(&mut r, &[3], 0, 9)), In::Run(rand_i32(&mut r, &[4], 0, 9))];
    check(&gpu, LayerKind::Concatenation { axis: 0 }, parts, "concat i32");
    let x = rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0);
    let value = HostTensor::from_f32(vec![], vec![2.5]).unwrap();
    let pads = i64s(&[6], &[0, 1, -1, 1, 2, 0]);
    let ins = vec![In::Run(x), In::Const(pads), In::Const(value)];
    check(&gpu, LayerKind::Padding { mode: PaddingMode::Constant }, ins, "pad constant with a crop");
}

#[test]
fn gathers() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(13);
    let data = rand_f32(&mut r, &[4, 5, 3], -1.0, 1.0);
    let idx = i64s(&[2, 3], &[0, -1, 3, 2, 2, 1]);
    for axis in 0..3 {
        let idx = if axis == 2 { i64s(&[2], &[2, -3]) } else { idx.clone() };
        check(
            &gpu,
            LayerKind::Gather { mode: GatherMode::Default { axis } },
            vec![In::Run(data.clone()), In::Run(idx)],
            &format!("gather axis {axis}"),
        );
    }
    let idx = HostTensor::new(vec![4, 2, 3], TensorData::I32((0..24).map(|i| (i * 7 % 5) - 2).collect())).unwrap();
    let ins = vec![In::Run(data.clone()), In::Run(idx)];
    check(&gpu, LayerKind::Gather { mode: GatherMode::Elements { axis: 1 } }, ins, "gather elements");
    // Integer data, constant indices.
    let words = cast(&data, DataType::I32);
    check(
        &gpu,
        LayerKind::Gather { mode: GatherMode::Default { axis: 1 } },
        vec![In::Run(words), In::Const(i64s(&[1], &[3]))],
        "gather i32",
    );
}

#[test]
fn shape_arithmetic_stays_on_the_host() {
    let Some(gpu) = gpu() else { return };
    // Shape -> Gather -> Concat -> Reshape: the reshape dims are computed at run time.
    let mut net = kiln::Network::new("shapes");
    let x = net.add_input("x", DataType::F32, kiln::Shape::fixed(&[2, 3, 4])).unwrap();
    let shape = net.add_shape(x).unwrap();
    let shape = net.output(shape, 0);
    let idx = net.add_constant(&[1], TensorData::I64(vec![0])).unwrap();
    let idx = net.output(idx, 0);
    let first = net.add_gather(shape, idx, GatherMode::Default { axis: 0 }).unwrap();
    let first = net.output(first, 0);
    let minus_one = net.add_constant(&[1], TensorData::I64(vec![-1])).unwrap();
    let minus_one = net.output(minus_one, 0);
    let dims = net.add_concatenation(&[first, minus_one], 0).unwrap();
    let dims = net.output(dims, 0);
    let p =
        ShuffleParams { first_transpose: vec![], reshape: None, second_transpose: vec![], zero_is_placeholder: true };
    let y = net.add_layer("reshape", LayerKind::Shuffle(p), vec![Some(x), Some(dims)]).unwrap();
    let y = net.output(y, 0);
    net.mark_output(y).unwrap();
    let feeds = vec![rand_f32(&mut rng(14), &[2, 3, 4], -1.0, 1.0)];
    let (got, want) = both(&gpu, &net, &feeds);
    assert_close(&got[0], &want[0], 0.0, 0.0, "reshape by a computed shape");
    assert_eq!(got[0].shape(), &[2, 12]);
}
