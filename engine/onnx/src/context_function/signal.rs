//! STFT (opset 17) as frames gathered from the signal, windowed, and a DFT over each.

use super::{formal_input as input, formal_output as output, int_attr, to, Body, Call};
use kiln::DataType;

/// STFT: `[batch, length, 1|2]` → `[batch, frames, bins, 2]`, frame `f` being the samples
/// `f·step .. f·step + frame_length` times the window; `frames = 1 + (length - frame_length) / step`.
pub(super) fn stft(call: &Call, b: &mut Body) -> Result<(), String> {
    let signal = input(0);
    let rank = call.input_type(0)?.dims.len();
    if rank != 3 {
        return Err(format!("the signal must be 3-D [batch, length, 1|2], got rank {rank}"));
    }
    let onesided = call.int("onesided", 1);
    let one_d = b.ints(&[1]);
    let scalar_shape = b.ints(&[]);
    let as_vector = |b: &mut Body, t: &str| {
        let t = b.op("Cast", &[t], to(DataType::I64));
        b.op("Reshape", &[&t, &one_d], vec![])
    };
    let length = b.op("Shape", &[&signal], vec![int_attr("start", 1), int_attr("end", 2)]);
    let step = as_vector(b, &input(1));
    let frame_length = if call.has_input(3) {
        as_vector(b, &input(3))
    } else if call.has_input(2) {
        b.op("Shape", &[&input(2)], vec![int_attr("start", 0), int_attr("end", 1)])
    } else {
        length.clone()
    };
    let span = b.op("Sub", &[&length, &frame_length], vec![]);
    let steps = b.op("Div", &[&span, &step], vec![]);
    let frames = b.op("Add", &[&steps, &one_d], vec![]);
    let scalar = |b: &mut Body, t: &str| b.op("Reshape", &[t, &scalar_shape], vec![]);
    let (zero, one) = (b.ints(&[0]), b.ints(&[1]));
    let (zero, one) = (scalar(b, &zero), scalar(b, &one));
    let (frames, step_scalar, frame_length) = (scalar(b, &frames), scalar(b, &step), scalar(b, &frame_length));
    // indices[f][j] = f·step + j
    let frame_index = b.op("Range", &[&zero, &frames, &one], vec![]);
    let starts = b.op("Mul", &[&frame_index, &step_scalar], vec![]);
    let starts = b.op("Unsqueeze", &[&starts, &one_d], vec![]);
    let offsets = b.op("Range", &[&zero, &frame_length, &one], vec![]);
    let axis0 = b.ints(&[0]);
    let offsets = b.op("Unsqueeze", &[&offsets, &axis0], vec![]);
    let indices = b.op("Add", &[&starts, &offsets], vec![]);
    let mut framed = b.op("Gather", &[&signal, &indices], vec![int_attr("axis", 1)]);
    if call.has_input(2) {
        let column = b.ints(&[-1, 1]);
        let window = b.op("Reshape", &[&input(2), &column], vec![]);
        let window = b.op("CastLike", &[&window, &signal], vec![]);
        framed = b.op("Mul", &[&framed, &window], vec![]);
    }
    let axis = b.ints(&[2]);
    let axis = scalar(b, &axis);
    b.node_into("DFT", &[&framed, "", &axis], &[&output(0)], vec![int_attr("onesided", onesided)]);
    Ok(())
}
