//! FlexAttention (ai.onnx.preview opset 1), as onnx 1.23 expands it.

use super::{formal_input as input, formal_output as output, int_attr, ints_attr, to, Body, Call};
use kiln::DataType;

/// FlexAttention: `softmax(score_mod(Q·Kᵀ·scale))·V` over `[batch, heads, seq, head]`, with
/// K and V heads repeated for grouped queries, the optional `score_mod` / `prob_mod` graphs
/// inlined, and the softmax in `softmax_precision` (by default f32, f64 for f64 inputs).
pub(super) fn flex_attention(call: &Call, b: &mut Body) -> Result<(), String> {
    let (q, k, v) = (input(0), input(1), input(2));
    let q_type = call.input_type(0)?.dtype;
    let v_type = call.input_type(2)?.dtype;
    for i in 0..3 {
        let rank = call.input_type(i)?.dims.len();
        if rank != 4 {
            return Err(format!("input #{i} must be 4-D [batch, heads, seq, head], got rank {rank}"));
        }
    }
    let softmax_type = match call.attribute("softmax_precision").and_then(|a| a.i) {
        Some(code) => crate::tensor::dtype_from_onnx(code as i32)?,
        None if q_type == DataType::F64 => DataType::F64,
        None => DataType::F32,
    };
    let slice_of = |b: &mut Body, t: &str, start: i64, end: i64| {
        b.op("Shape", &[t], vec![int_attr("start", start), int_attr("end", end)])
    };
    let batch = slice_of(b, &q, 0, 1);
    let kv_len = slice_of(b, &k, -2, -1);
    let q_heads = slice_of(b, &q, 1, 2);
    let kv_heads = slice_of(b, &k, 1, 2);
    let repeat = b.op("Div", &[&q_heads, &kv_heads], vec![]);
    let axis2 = b.ints(&[2]);
    // K and V with each kv head repeated for its group of query heads.
    let mut aligned = Vec::new();
    for t in [&k, &v] {
        let unsqueezed = b.op("Unsqueeze", &[t, &axis2], vec![]);
        let head = slice_of(b, t, 3, 4);
        let expand_shape = b.op("Concat", &[&batch, &kv_heads, &repeat, &kv_len, &head], vec![int_attr("axis", 0)]);
        let expanded = b.op("Expand", &[&unsqueezed, &expand_shape], vec![]);
        let shape = b.op("Concat", &[&batch, &q_heads, &kv_len, &head], vec![int_attr("axis", 0)]);
        aligned.push(b.op("Reshape", &[&expanded, &shape], vec![]));
    }
    let (k_aligned, v_aligned) = (aligned[0].clone(), aligned[1].clone());
    let scale = match call.float("scale") {
        Some(s) => b.scalar_f32(s),
        None => {
            let head = slice_of(b, &q, 3, 4);
            let head = b.op("Cast", &[&head], to(DataType::F32));
            let root = b.op("Sqrt", &[&head], vec![]);
            let one = b.scalar_f32(1.0);
            let scale = b.op("Div", &[&one, &root], vec![]);
            // A 0-D scale, as the expansion's Gather of the head size gives.
            let axes = b.ints(&[0]);
            b.op("Squeeze", &[&scale, &axes], vec![])
        }
    };
    // Both Q and K carry sqrt(scale), which keeps Q·Kᵀ in range for low precisions.
    let root_scale = b.op("Sqrt", &[&scale], vec![]);
    let root_scale = b.op("Cast", &[&root_scale], to(q_type));
    let q_scaled = b.op("Mul", &[&q, &root_scale], vec![]);
    let k_scaled = b.op("Mul", &[&k_aligned, &root_scale], vec![]);
    let k_t = b.op("Transpose", &[&k_scaled], vec![ints_attr("perm", &[0, 1, 3, 2])]);
    let scores = b.op("MatMul", &[&q_scaled, &k_t], vec![]);
    let scores = b.op("Cast", &[&scores], to(softmax_type));
    let scores = match call.graph("score_mod") {
        Some(g) => single(b.inline_graph(g, &[&scores])?, "score_mod")?,
        None => scores,
    };
    let probs = b.op("Softmax", &[&scores], vec![int_attr("axis", 3)]);
    let probs = match call.graph("prob_mod") {
        Some(g) => single(b.inline_graph(g, &[&probs])?, "prob_mod")?,
        None => probs,
    };
    if v_type == softmax_type {
        b.node_into("MatMul", &[&probs, &v_aligned], &[&output(0)], vec![]);
    } else {
        let v_wide = b.op("Cast", &[&v_aligned], to(softmax_type));
        let y = b.op("MatMul", &[&probs, &v_wide], vec![]);
        b.node_into("Cast", &[&y], &[&output(0)], to(q_type));
    }
    Ok(())
}

fn single(outputs: Vec<String>, what: &str) -> Result<String, String> {
    match <[String; 1]>::try_from(outputs) {
        Ok([one]) => Ok(one),
        Err(outputs) => Err(format!("the `{what}` graph must have one output, got {}", outputs.len())),
    }
}
