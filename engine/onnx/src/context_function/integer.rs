//! ConvInteger, MatMulInteger and QLinearConv (opset 10): the zero points subtracted in f64, a
//! float Conv / MatMul, and the result cast to i32 (QLinearConv: requantized). f64 holds every
//! 8-bit product sum exactly (below 2⁵³), so the result equals the integer arithmetic.

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

/// QLinearConv (opset 10): ConvInteger's exact f64 convolution of the centered operands (plus
/// the int32 bias), times `x_scale · w_scale / y_scale` computed in f32 as the standard's
/// reference does, plus the output zero point, saturated to its type and rounded half to even.
/// A per-output-channel `w_scale` scales its own channel.
pub(super) fn qlinear_conv(call: &Call, b: &mut Body) -> Result<(), String> {
    let rank = call.input_type(3)?.dims.len();
    let out_type = call.input_type(7)?.dtype;
    let (low, high) = match out_type {
        DataType::U8 => (0.0, 255.0),
        DataType::I8 => (-128.0, 127.0),
        other => return Err(format!("QLinearConv's y_zero_point must be uint8 or int8, got {other}")),
    };
    let x = centered(b, call, 0, 2, None);
    let per_channel: Vec<i64> = std::iter::once(-1).chain(std::iter::repeat_n(1, rank.saturating_sub(1))).collect();
    let w = centered(b, call, 3, 5, Some(&per_channel));
    let mut conv_inputs = vec![x, w];
    if call.has_input(8) {
        conv_inputs.push(b.op("Cast", &[&input(8)], to(DataType::F64)));
    }
    let conv_refs: Vec<&str> = conv_inputs.iter().map(String::as_str).collect();
    let conv = b.op("Conv", &conv_refs, call.node.attribute.clone());
    let scale = b.op("Mul", &[&input(1), &input(4)], vec![]);
    let mut scale = b.op("Div", &[&scale, &input(6)], vec![]);
    if call.input_type(4)?.dims.len() == 1 {
        // [M] scales channel axis 1 of the output (N, M, spatial…).
        let shape: Vec<i64> = [1, -1].into_iter().chain(std::iter::repeat_n(1, rank.saturating_sub(2))).collect();
        let shape = b.ints(&shape);
        scale = b.op("Reshape", &[&scale, &shape], vec![]);
    }
    let scale = b.op("Cast", &[&scale], to(DataType::F64));
    let scaled = b.op("Mul", &[&conv, &scale], vec![]);
    let zero_point = b.op("Cast", &[&input(7)], to(DataType::F64));
    let shifted = b.op("Add", &[&scaled, &zero_point], vec![]);
    let bound = |b: &mut Body, v: f32| {
        let c = b.scalar_f32(v);
        b.op("Cast", &[&c], to(DataType::F64))
    };
    let (low, high) = (bound(b, low), bound(b, high));
    let clipped = b.op("Clip", &[&shifted, &low, &high], vec![]);
    let rounded = b.op("Round", &[&clipped], vec![]);
    b.node_into("Cast", &[&rounded], &[&output(0)], to(out_type));
    Ok(())
}
