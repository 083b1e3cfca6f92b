//! MaxUnpool (opset 22) and TensorScatter (opset 24): writes of values at computed
//! positions, expanded into ScatterElements.

use super::{formal_input as input, formal_output as output, int_attr, Body, Call};

/// MaxUnpool: `X` written into zeros of the unpooled shape `(in - 1)·stride + kernel - pads`
/// at the flat positions `I` (as MaxPool returns them); an `output_shape` input pads that
/// with zeros at the end of each axis (the onnx reference's convention).
pub(super) fn max_unpool(call: &Call, b: &mut Body) -> Result<(), String> {
    let (x, indices) = (input(0), input(1));
    let rank = call.input_type(0)?.dims.len();
    let spatial = rank.checked_sub(2).filter(|&s| s > 0).ok_or("the input must be (N, C, spatial…)")?;
    let list = |name: &str, len: usize, default: i64| -> Result<Vec<i64>, String> {
        match call.attribute(name).map(|a| a.ints.clone()) {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(format!("`{name}` must hold {len} values, got {}", v.len())),
        }
    };
    let kernel = call.attribute("kernel_shape").map(|a| a.ints.clone()).ok_or("kernel_shape is required")?;
    if kernel.len() != spatial {
        return Err(format!("kernel_shape must hold {spatial} values, got {}", kernel.len()));
    }
    let strides = list("strides", spatial, 1)?;
    let pads = list("pads", 2 * spatial, 0)?;
    // unpooled = shape(X)·scale + shift, with scale 1 and shift 0 on N and C.
    let scale: Vec<i64> = [1, 1].into_iter().chain(strides.iter().copied()).collect();
    let shift = (0..spatial)
        .map(|d| {
            kernel[d]
                .checked_sub(strides[d])
                .and_then(|v| v.checked_sub(pads[d]))
                .and_then(|v| v.checked_sub(pads[spatial + d]))
        })
        .collect::<Option<Vec<i64>>>()
        .ok_or("kernel_shape, strides and pads overflow")?;
    let shift: Vec<i64> = [0, 0].into_iter().chain(shift).collect();
    let x_shape = b.op("Shape", &[&x], vec![]);
    let scale = b.ints(&scale);
    let shift = b.ints(&shift);
    let scaled = b.op("Mul", &[&x_shape, &scale], vec![]);
    let unpooled = b.op("Add", &[&scaled, &shift], vec![]);
    let zeros = b.op("ConstantOfShape", &[&unpooled], vec![]);
    let zeros = b.op("CastLike", &[&zeros, &x], vec![]);
    let flat = b.ints(&[-1]);
    let zeros = b.op("Reshape", &[&zeros, &flat], vec![]);
    let positions = b.op("Reshape", &[&indices, &flat], vec![]);
    let values = b.op("Reshape", &[&x, &flat], vec![]);
    let written = b.op("ScatterElements", &[&zeros, &positions, &values], vec![int_attr("axis", 0)]);
    if call.has_input(2) {
        let y = b.op("Reshape", &[&written, &unpooled], vec![]);
        let wanted = b.op("Cast", &[&input(2)], super::to(kiln::DataType::I64));
        let extra = b.op("Sub", &[&wanted, &unpooled], vec![]);
        let begins = b.ints(&vec![0; rank]);
        let pads = b.op("Concat", &[&begins, &extra], vec![int_attr("axis", 0)]);
        b.node_into("Pad", &[&y, &pads], &[&output(0)], vec![]);
    } else {
        b.node_into("Reshape", &[&written, &unpooled], &[&output(0)], vec![]);
    }
    Ok(())
}

/// TensorScatter: `update` written into `past_cache` along `axis` from position
/// `write_indices[batch]` on (zero when omitted), modulo the cache length in circular mode.
pub(super) fn tensor_scatter(call: &Call, b: &mut Body) -> Result<(), String> {
    let (cache, update) = (input(0), input(1));
    let rank = call.input_type(0)?.dims.len();
    let axis = call.int("axis", -2);
    let axis =
        kiln::ir::shape::normalize_axis(axis, rank).ok_or(format!("axis {axis} is out of range for rank {rank}"))?;
    if axis == 0 {
        return Err("the axis cannot be the batch axis 0".into());
    }
    let circular = match call.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(format!("mode `{other}` (expected linear or circular)")),
    };
    let scalar_shape = b.ints(&[]);
    let length = b.op("Shape", &[&update], vec![int_attr("start", axis as i64), int_attr("end", axis as i64 + 1)]);
    let length = b.op("Reshape", &[&length, &scalar_shape], vec![]);
    let (zero, one) = (b.ints(&[0]), b.ints(&[1]));
    let (zero, one) =
        (b.op("Reshape", &[&zero, &scalar_shape], vec![]), b.op("Reshape", &[&one, &scalar_shape], vec![]));
    let steps = b.op("Range", &[&zero, &length, &one], vec![]);
    let along: Vec<i64> = (0..rank).map(|d| if d == axis { -1 } else { 1 }).collect();
    let along = b.ints(&along);
    let mut positions = b.op("Reshape", &[&steps, &along], vec![]);
    if call.has_input(2) {
        let per_batch: Vec<i64> = (0..rank).map(|d| if d == 0 { -1 } else { 1 }).collect();
        let per_batch = b.ints(&per_batch);
        let starts = b.op("Cast", &[&input(2)], super::to(kiln::DataType::I64));
        let starts = b.op("Reshape", &[&starts, &per_batch], vec![]);
        positions = b.op("Add", &[&positions, &starts], vec![]);
    }
    if circular {
        let cache_length =
            b.op("Shape", &[&cache], vec![int_attr("start", axis as i64), int_attr("end", axis as i64 + 1)]);
        positions = b.op("Mod", &[&positions, &cache_length], vec![]);
    }
    let update_shape = b.op("Shape", &[&update], vec![]);
    let positions = b.op("Expand", &[&positions, &update_shape], vec![]);
    b.node_into("ScatterElements", &[&cache, &positions, &update], &[&output(0)], vec![int_attr("axis", axis as i64)]);
    Ok(())
}
