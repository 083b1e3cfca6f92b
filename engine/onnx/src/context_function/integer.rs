//! ConvInteger and MatMulInteger (opset 10): the zero points subtracted in f64, a float
//! Conv / MatMul, and the result cast to i32. f64 holds every 8-bit product sum exactly
//! (below 2⁵³), so the result equals the integer arithmetic.

use super::{formal_input as input, formal_output as output, to, Body, Call};
use kiln::DataType;

/// `t - zero_point` in f64; `zero_point` reshaped by `zero_point_shape` when given.
fn centered(b: &mut Body, call: &Call, value: usize, zero_point: usize, zero_point_shape: Option<&[i64]>) -> String {
    let x = b.op("Cast", &[&input(value)], to(DataType::F64));
    if !call.has_input(zero_point) {
        return x;
    }
    let mut zp = b.op("Cast", &[&input(zero_point)], to(DataType::F64));
    let is_vector = call.inputs[zero_point].as_ref().is_some_and(|t| t.dims.len() == 1);
    if let (Some(shape), true) = (zero_point_shape, is_vector) {
        let shape = b.ints(shape);
        zp = b.op("Reshape", &[&zp, &shape], vec![]);
    }
    b.op("Sub", &[&x, &zp], vec![])
}

pub(super) fn conv_integer(call: &Call, b: &mut Body) -> Result<(), String> {
    let rank = call.input_type(1)?.dims.len();
    let x = centered(b, call, 0, 2, None);
    // A per-output-channel weight zero point broadcasts over (M, C/group, k…).
    let per_channel: Vec<i64> = std::iter::once(-1).chain(std::iter::repeat_n(1, rank.saturating_sub(1))).collect();
    let w = centered(b, call, 1, 3, Some(&per_channel));
    let conv = b.op("Conv", &[&x, &w], call.node.attribute.clone());
    b.node_into("Cast", &[&conv], &[&output(0)], to(DataType::I32));
    Ok(())
}

pub(super) fn matmul_integer(call: &Call, b: &mut Body) -> Result<(), String> {
    // A per-row zero point of A ([M]) broadcasts over A's rows; B's ([N]) over its columns.
    let a = centered(b, call, 0, 2, Some(&[-1, 1]));
    let bb = centered(b, call, 1, 3, None);
    let product = b.op("MatMul", &[&a, &bb], vec![]);
    b.node_into("Cast", &[&product], &[&output(0)], to(DataType::I32));
    Ok(())
}
