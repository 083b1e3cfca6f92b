//! NonZero and Unique: data-dependent output shapes, computed after a read-back.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind};

#[test]
fn non_zero_of_every_storage() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(80);
    let f = HostTensor::from_f32(vec![2, 3], vec![0.0, -0.0, 1.5, f32::NAN, 0.0, -2.0]).expect("shape");
    let inputs = [
        ("f32", f),
        ("i32", rand_i32(&mut r, &[3, 4, 2], -1, 2)),
        ("bool", rand_bool(&mut r, &[5, 3])),
        ("all zero", cast(&rand_i32(&mut r, &[4], 0, 1), DataType::I64)),
    ];
    for (what, x) in inputs {
        check(&gpu, LayerKind::NonZero, vec![In::Run(x)], &format!("NonZero {what}"));
    }
}

#[test]
fn unique_flat_and_along_an_axis() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(81);
    let f = cast(&rand_i32(&mut r, &[4, 6], -3, 3), DataType::F32);
    let rows = HostTensor::from_f32(vec![4, 3], vec![1.0, 2.0, 3.0, 0.0, 1.0, 1.0, 1.0, 2.0, 3.0, -1.0, 5.0, 0.0])
        .expect("shape");
    let ints = rand_i32(&mut r, &[10], -4, 4);
    for sorted in [true, false] {
        check(&gpu, LayerKind::Unique { axis: None, sorted }, vec![In::Run(f.clone())], "Unique f32 flat");
        check(&gpu, LayerKind::Unique { axis: Some(0), sorted }, vec![In::Run(rows.clone())], "Unique rows");
        check(&gpu, LayerKind::Unique { axis: Some(1), sorted }, vec![In::Run(f.clone())], "Unique columns");
        check(&gpu, LayerKind::Unique { axis: None, sorted }, vec![In::Run(ints.clone())], "Unique i32");
    }
}
