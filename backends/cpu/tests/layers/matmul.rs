//! MatrixMultiply: operand ops, batch broadcasting, integer wrapping, and a randomized
//! cross-check of the GEMM path against a direct loop.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind, MatrixOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn mm(a: HostTensor, op_a: MatrixOp, b: HostTensor, op_b: MatrixOp) -> HostTensor {
    run1(LayerKind::MatrixMultiply { op_a, op_b }, vec![In::Run(a), In::Run(b)])
}

#[test]
fn plain_and_transposed_operands() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let expected = [58.0, 64.0, 139.0, 154.0];
    assert_close(&mm(a.clone(), MatrixOp::None, b.clone(), MatrixOp::None), DataType::F32, &[2, 2], &expected, 0.0);
    let at = f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let bt = f32s(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]);
    assert_close(
        &mm(at.clone(), MatrixOp::Transpose, bt.clone(), MatrixOp::Transpose),
        DataType::F32,
        &[2, 2],
        &expected,
        0.0,
    );
    assert_close(&mm(a, MatrixOp::None, bt, MatrixOp::Transpose), DataType::F32, &[2, 2], &expected, 0.0);
    assert_close(&mm(at, MatrixOp::Transpose, b, MatrixOp::None), DataType::F32, &[2, 2], &expected, 0.0);
}

#[test]
fn vector_operands_drop_their_dimension() {
    let a = f64s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let v = f64s(&[3], &[1.0, 0.0, -1.0]);
    assert_close(&mm(a.clone(), MatrixOp::None, v.clone(), MatrixOp::Vector), DataType::F64, &[2], &[-2.0, -2.0], 0.0);
    let u = f64s(&[2], &[1.0, 1.0]);
    assert_close(&mm(u, MatrixOp::Vector, a, MatrixOp::None), DataType::F64, &[3], &[5.0, 7.0, 9.0], 0.0);
    assert_close(&mm(v.clone(), MatrixOp::Vector, v, MatrixOp::Vector), DataType::F64, &[], &[2.0], 0.0);
}

#[test]
fn batch_dims_broadcast() {
    // a: [2, 1, 1, 2] (two batches), b: [3, 2, 1] (three batches) → [2, 3, 1, 1].
    let a = f32s(&[2, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32s(&[3, 2, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let y = mm(a, MatrixOp::None, b, MatrixOp::None);
    assert_close(&y, DataType::F32, &[2, 3, 1, 1], &[1.0, 2.0, 3.0, 3.0, 4.0, 7.0], 0.0);
}

#[test]
fn half_types_and_empty_inner_dimension() {
    let a = f16s(&[1, 2], &[0.5, 0.25]);
    let b = f16s(&[2, 1], &[2.0, 4.0]);
    assert_close(&mm(a, MatrixOp::None, b, MatrixOp::None), DataType::F16, &[1, 1], &[2.0], 0.0);
    let y = mm(bf16s(&[2, 0], &[]), MatrixOp::None, bf16s(&[0, 3], &[]), MatrixOp::None);
    assert_close(&y, DataType::BF16, &[2, 3], &[0.0; 6], 0.0);
}

#[test]
fn integer_products_wrap() {
    let a = i32s(&[1, 2], &[2, 3]);
    let b = i32s(&[2, 2], &[4, 5, 6, 7]);
    assert_exact(&mm(a, MatrixOp::None, b, MatrixOp::None), &i32s(&[1, 2], &[26, 31]));
    let a = i8s(&[1, 2], &[100, 100]);
    let b = i8s(&[2, 1], &[2, 1]);
    assert_exact(&mm(a, MatrixOp::None, b, MatrixOp::None), &i8s(&[1, 1], &[44]));
    let a = u8s(&[2, 2], &[1, 2, 3, 4]);
    assert_exact(&mm(a.clone(), MatrixOp::Transpose, a, MatrixOp::None), &u8s(&[2, 2], &[10, 14, 14, 20]));
}

/// Direct product in f64 over broadcast batches.
fn naive(
    a: &[f32],
    a_shape: &[usize],
    op_a: MatrixOp,
    b: &[f32],
    b_shape: &[usize],
    op_b: MatrixOp,
) -> (Vec<usize>, Vec<f64>) {
    let (ra, rb) = (a_shape.len(), b_shape.len());
    let (m, k, a_batch) = match op_a {
        MatrixOp::None => (a_shape[ra - 2], a_shape[ra - 1], &a_shape[..ra - 2]),
        MatrixOp::Transpose => (a_shape[ra - 1], a_shape[ra - 2], &a_shape[..ra - 2]),
        MatrixOp::Vector => (1, a_shape[ra - 1], &a_shape[..ra - 1]),
    };
    let (n, b_batch) = match op_b {
        MatrixOp::None => (b_shape[rb - 1], &b_shape[..rb - 2]),
        MatrixOp::Transpose => (b_shape[rb - 2], &b_shape[..rb - 2]),
        MatrixOp::Vector => (1, &b_shape[..rb - 1]),
    };
    let rank = a_batch.len().max(b_batch.len());
    let pad = |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, rank - s.len()).chain(s.iter().copied()).collect() };
    let (pa, pb) = (pad(a_batch), pad(b_batch));
    let batch: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let count: usize = batch.iter().product();
    let at = |i: usize, p: usize, bi: usize| match op_a {
        MatrixOp::None | MatrixOp::Vector => a[bi * m * k + i * k + p],
        MatrixOp::Transpose => a[bi * m * k + p * m + i],
    };
    let bt = |p: usize, j: usize, bi: usize| match op_b {
        MatrixOp::None => b[bi * k * n + p * n + j],
        MatrixOp::Transpose => b[bi * k * n + j * k + p],
        MatrixOp::Vector => b[bi * k + p],
    };
    let mut out = vec![];
    for flat in 0..count {
        // Unravel the output batch index and map it into each operand's batch.
        let (mut rem, mut ia, mut ib) = (flat, 0, 0);
        let (mut sa, mut sb) = (1, 1);
        for d in (0..rank).rev() {
            let c = rem % batch[d];
            rem /= batch[d];
            ia += if pa[d] == 1 { 0 } else { c * sa };
            ib += if pb[d] == 1 { 0 } else { c * sb };
            sa *= pa[d];
            sb *= pb[d];
        }
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|p| at(i, p, ia) as f64 * bt(p, j, ib) as f64).sum());
            }
        }
    }
    let mut shape = batch;
    if op_a != MatrixOp::Vector {
        shape.push(m);
    }
    if op_b != MatrixOp::Vector {
        shape.push(n);
    }
    (shape, out)
}

#[test]
fn gemm_matches_direct_loops_on_random_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let ops = [MatrixOp::None, MatrixOp::Transpose, MatrixOp::Vector];
    for _ in 0..60 {
        let (op_a, op_b) = (ops[rng.gen_range(0..3)], ops[rng.gen_range(0..3)]);
        let (m, k, n) = (rng.gen_range(1..=40), rng.gen_range(0..=40), rng.gen_range(1..=40));
        let batch_rank = rng.gen_range(0..=2);
        let batch: Vec<usize> = (0..batch_rank).map(|_| rng.gen_range(1..=3)).collect();
        // Each operand keeps a random suffix of the batch dims, with some set to 1.
        let operand_batch = |rng: &mut ChaCha8Rng| -> Vec<usize> {
            let keep = rng.gen_range(0..=batch.len());
            batch[batch.len() - keep..].iter().map(|&d| if rng.gen_bool(0.3) { 1 } else { d }).collect()
        };
        let mut a_shape = operand_batch(&mut rng);
        match op_a {
            MatrixOp::None => a_shape.extend([m, k]),
            MatrixOp::Transpose => a_shape.extend([k, m]),
            MatrixOp::Vector => a_shape.push(k),
        }
        let mut b_shape = operand_batch(&mut rng);
        match op_b {
            MatrixOp::None => b_shape.extend([k, n]),
            MatrixOp::Transpose => b_shape.extend([n, k]),
            MatrixOp::Vector => b_shape.push(k),
        }
        let a: Vec<f32> = (0..a_shape.iter().product()).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..b_shape.iter().product()).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let (shape, expected) = naive(&a, &a_shape, op_a, &b, &b_shape, op_b);
        let y = mm(f32s(&a_shape, &a), op_a, f32s(&b_shape, &b), op_b);
        assert_close(&y, DataType::F32, &shape, &expected, 1e-5);
    }
}
