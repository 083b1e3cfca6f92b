//! RotaryEmbedding (opset 23) and CausalConvWithState (opset 27), as onnx 1.23 expands them.

use super::{formal_input as input, formal_output as output, int_attr, ints_attr, Body, Call};

/// RotaryEmbedding: rotates the first `rotary_embedding_dim` features of each head by the
/// cached cos/sin of its position, as halves or interleaved pairs. `X` is
/// `[batch, heads, seq, head]` or `[batch, seq, heads * head]` (then `num_heads` is needed).
pub(super) fn rotary_embedding(call: &Call, b: &mut Body) -> Result<(), String> {
    let (x, cos, sin) = (input(0), input(1), input(2));
    let rank = call.input_type(0)?.dims.len();
    let interleaved = call.int("interleaved", 0) != 0;
    let rotary_dim = call.int("rotary_embedding_dim", 0);
    let num_heads = call.int("num_heads", 0);
    let zero = b.ints(&[0]);
    let minus_one = b.ints(&[-1]);
    let two = b.ints(&[2]);
    // The input as [batch, seq, heads, head].
    let x_in = match rank {
        4 => b.op("Transpose", &[&x], vec![ints_attr("perm", &[0, 2, 1, 3])]),
        3 => {
            if num_heads <= 0 {
                return Err("a 3-D input needs the num_heads attribute".into());
            }
            let heads = b.ints(&[num_heads]);
            let shape = b.op("Concat", &[&zero, &zero, &heads, &minus_one], vec![int_attr("axis", 0)]);
            b.op("Reshape", &[&x, &shape], vec![])
        }
        r => return Err(format!("the input must be 3-D or 4-D, got rank {r}")),
    };
    let head_size = b.op("Shape", &[&x_in], vec![int_attr("start", 3), int_attr("end", 4)]);
    let rotary = if rotary_dim > 0 { b.ints(&[rotary_dim]) } else { head_size.clone() };
    let rest = b.op("Sub", &[&head_size, &rotary], vec![]);
    let lengths = b.op("Concat", &[&rotary, &rest], vec![int_attr("axis", 0)]);
    let parts = b.op_n("Split", &[&x_in, &lengths], 2, vec![int_attr("axis", -1)]);
    let (to_rotate, keep) = (&parts[0], &parts[1]);
    let (cos, sin) = if call.has_input(3) {
        let positions = input(3);
        (b.op("Gather", &[&cos, &positions], vec![]), b.op("Gather", &[&sin, &positions], vec![]))
    } else {
        (cos, sin)
    };
    let half = b.op("Div", &[&rotary, &two], vec![]);
    let cos = b.op("Slice", &[&cos, &zero, &half, &two], vec![]);
    let sin = b.op("Slice", &[&sin, &zero, &half, &two], vec![]);
    let cos = b.op("Unsqueeze", &[&cos, &two], vec![]);
    let sin = b.op("Unsqueeze", &[&sin, &two], vec![]);
    let (x1, x2) = if interleaved {
        let one = b.ints(&[1]);
        let last = b.ints(&[3]);
        let end = b.op("Add", &[&rotary, &one], vec![]);
        (
            b.op("Slice", &[to_rotate, &zero, &rotary, &last, &two], vec![]),
            b.op("Slice", &[to_rotate, &one, &end, &last, &two], vec![]),
        )
    } else {
        let halves = b.op_n("Split", &[to_rotate], 2, vec![int_attr("axis", -1), int_attr("num_outputs", 2)]);
        (halves[0].clone(), halves[1].clone())
    };
    let cos_x1 = b.op("Mul", &[&cos, &x1], vec![]);
    let sin_x2 = b.op("Mul", &[&sin, &x2], vec![]);
    let real = b.op("Sub", &[&cos_x1, &sin_x2], vec![]);
    let sin_x1 = b.op("Mul", &[&sin, &x1], vec![]);
    let cos_x2 = b.op("Mul", &[&cos, &x2], vec![]);
    let imaginary = b.op("Add", &[&sin_x1, &cos_x2], vec![]);
    let rotated = if interleaved {
        let real = b.op("Unsqueeze", &[&real, &minus_one], vec![]);
        let imaginary = b.op("Unsqueeze", &[&imaginary, &minus_one], vec![]);
        let pairs = b.op("Concat", &[&real, &imaginary], vec![int_attr("axis", -1)]);
        let shape = b.op("Shape", &[to_rotate], vec![]);
        b.op("Reshape", &[&pairs, &shape], vec![])
    } else {
        b.op("Concat", &[&real, &imaginary], vec![int_attr("axis", -1)])
    };
    let joined = b.op("Concat", &[&rotated, keep], vec![int_attr("axis", -1)]);
    let back = if rank == 4 { b.op("Transpose", &[&joined], vec![ints_attr("perm", &[0, 2, 1, 3])]) } else { joined };
    let x_shape = b.op("Shape", &[&x], vec![]);
    b.node_into("Reshape", &[&back, &x_shape], &[&output(0)], vec![]);
    Ok(())
}

/// CausalConvWithState: a depthwise causal 1-D convolution over `[batch, channels, length]`
/// whose left context is `past_state` (zeros when omitted), with an optional SiLU; the
/// present state is the last `kernel - 1` positions of the padded input.
pub(super) fn causal_conv_with_state(call: &Call, b: &mut Body) -> Result<(), String> {
    let (x, weight) = (input(0), input(1));
    let x_type = call.input_type(0)?;
    if x_type.dims.len() != 3 {
        return Err(format!("the input must be 3-D [batch, channels, length], got rank {}", x_type.dims.len()));
    }
    let weight_type = call.input_type(1)?;
    let channels = x_type.dims[1]
        .fixed()
        .or_else(|| weight_type.dims.first().and_then(|d| d.fixed()))
        .ok_or("the channel count must be known at build time (it is the convolution's group)")?;
    let activation = call.string("activation", "none")?;
    let silu = match activation.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => return Err(format!("activation `{other}` (expected none, silu or swish)")),
    };
    let one = b.ints(&[1]);
    let kernel = b.op("Shape", &[&weight], vec![int_attr("start", 2), int_attr("end", 3)]);
    let context = b.op("Sub", &[&kernel, &one], vec![]);
    let past = if call.has_input(3) {
        input(3)
    } else {
        let batch = b.op("Shape", &[&x], vec![int_attr("start", 0), int_attr("end", 1)]);
        let channel = b.op("Shape", &[&x], vec![int_attr("start", 1), int_attr("end", 2)]);
        let shape = b.op("Concat", &[&batch, &channel, &context], vec![int_attr("axis", 0)]);
        let zeros = b.op("ConstantOfShape", &[&shape], vec![]);
        b.op("CastLike", &[&zeros, &x], vec![])
    };
    let padded = b.op("Concat", &[&past, &x], vec![int_attr("axis", 2)]);
    let bias = if call.has_input(2) { input(2) } else { String::new() };
    let conv_inputs: Vec<&str> = if bias.is_empty() { vec![&padded, &weight] } else { vec![&padded, &weight, &bias] };
    let conv = b.op("Conv", &conv_inputs, vec![int_attr("group", channels as i64)]);
    if silu {
        let as_f32 = b.op("Cast", &[&conv], super::to(kiln::DataType::F32));
        let sigmoid = b.op("Sigmoid", &[&as_f32], vec![]);
        let product = b.op("Mul", &[&as_f32, &sigmoid], vec![]);
        b.node_into("CastLike", &[&product, &conv], &[&output(0)], vec![]);
    } else {
        b.node_into("Identity", &[&conv], &[&output(0)], vec![]);
    }
    let length = b.op("Shape", &[&padded], vec![int_attr("start", 2), int_attr("end", 3)]);
    let start = b.op("Sub", &[&length, &context], vec![]);
    let axis = b.ints(&[2]);
    b.node_into("Slice", &[&padded, &start, &length, &axis], &[&output(1)], vec![]);
    Ok(())
}
