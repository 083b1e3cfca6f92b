//! LinearAttention (opset 27), as onnx 1.23 expands it: a Scan over time of the recurrent
//! state update (linear, gated, delta or gated delta rule) and its read-out.

use super::{formal_input as input, formal_output as output, graph_attr, int_attr, ints_attr, to, Body, Call};
use kiln::DataType;

/// LinearAttention over `[batch, seq, heads·dim]` inputs with a `[batch, kv_heads, dk, dv]`
/// state: per step, `S = exp(decay)·S` (gated rules), the write `kᵀ·v` or, for the delta
/// rules, `kᵀ·β(v - Sᵀk)`, and the output `scale·q·S` (query heads share kv heads in groups).
pub(super) fn linear_attention(call: &Call, b: &mut Body) -> Result<(), String> {
    let q_heads = call.int("q_num_heads", 0);
    let kv_heads = call.int("kv_num_heads", 0);
    if q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0 {
        return Err(format!("q_num_heads {q_heads} must be a positive multiple of kv_num_heads {kv_heads}"));
    }
    let rule = call.string("update_rule", "gated_delta")?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => return Err(format!("update_rule `{other}` (expected linear, gated, delta or gated_delta)")),
    };
    for (slot, needed, what) in [(4, gated, "decay"), (5, delta, "beta")] {
        if needed && !call.has_input(slot) {
            return Err(format!("update_rule `{rule}` needs the {what} input"));
        }
    }
    let (q, k, v) = (input(0), input(1), input(2));
    let minus_one = b.ints(&[-1]);
    let one = b.ints(&[1]);
    let hq = b.ints(&[q_heads]);
    let hkv = b.ints(&[kv_heads]);
    let batch = b.op("Shape", &[&q], vec![int_attr("start", 0), int_attr("end", 1)]);
    let seq = b.op("Shape", &[&q], vec![int_attr("start", 1), int_attr("end", 2)]);
    // [batch, seq, heads·dim] → [seq, batch, heads, dim], scanned over axis 0.
    let time_major = |b: &mut Body, t: &str, shape: &str| {
        let t = b.op("Reshape", &[t, shape], vec![]);
        b.op("Transpose", &[&t], vec![ints_attr("perm", &[1, 0, 2, 3])])
    };
    let q_shape = b.op("Concat", &[&batch, &seq, &hq, &minus_one], vec![int_attr("axis", 0)]);
    let q4 = time_major(b, &q, &q_shape);
    let kv_shape = b.op("Concat", &[&batch, &seq, &hkv, &minus_one], vec![int_attr("axis", 0)]);
    let k4 = time_major(b, &k, &kv_shape);
    let v4 = time_major(b, &v, &kv_shape);
    let mut scanned = vec![q4, k4, v4];
    if gated {
        scanned.push(time_major(b, &input(4), &kv_shape));
    }
    if delta {
        let beta_shape = b.op("Concat", &[&batch, &seq, &minus_one, &one], vec![int_attr("axis", 0)]);
        scanned.push(time_major(b, &input(5), &beta_shape));
    }
    let q_last = b.op("Shape", &[&q], vec![int_attr("start", 2), int_attr("end", 3)]);
    let v_last = b.op("Shape", &[&v], vec![int_attr("start", 2), int_attr("end", 3)]);
    let dk = b.op("Div", &[&q_last, &hq], vec![]);
    let dv = b.op("Div", &[&v_last, &hkv], vec![]);
    let state0 = if call.has_input(3) {
        b.op("Cast", &[&input(3)], to(DataType::F32))
    } else {
        let shape = b.op("Concat", &[&batch, &hkv, &dk, &dv], vec![int_attr("axis", 0)]);
        b.op("ConstantOfShape", &[&shape], vec![])
    };
    let scale = match call.float("scale").filter(|&s| s != 0.0) {
        Some(s) => b.scalar_f32(s),
        None => {
            let dk = b.op("Squeeze", &[&dk], vec![]);
            let dk = b.op("Cast", &[&dk], to(DataType::F32));
            let root = b.op("Sqrt", &[&dk], vec![]);
            b.op("Reciprocal", &[&root], vec![])
        }
    };
    let minus_two = b.ints(&[-2]);
    let grouped = q_heads != kv_heads;
    let read_shapes = if grouped {
        let group = b.ints(&[q_heads / kv_heads]);
        let two = b.ints(&[2]);
        let expand = b.op("Concat", &[&batch, &hkv, &group, &dk, &dv], vec![int_attr("axis", 0)]);
        let read = b.op("Concat", &[&batch, &hq, &dk, &dv], vec![int_attr("axis", 0)]);
        Some((two, expand, read))
    } else {
        None
    };

    // The step: [state_in, q_t, k_t, v_t, decay_t?, beta_t?] -> [state_out, output_t].
    let mut s = Body::nested("step/");
    let mut formals = vec!["step/state_in", "step/q_t", "step/k_t", "step/v_t"];
    if gated {
        formals.push("step/decay_t");
    }
    if delta {
        formals.push("step/beta_t");
    }
    let f32_of = |s: &mut Body, t: &str| s.op("Cast", &[t], to(DataType::F32));
    let (q_t, k_t, v_t) = (f32_of(&mut s, formals[1]), f32_of(&mut s, formals[2]), f32_of(&mut s, formals[3]));
    let mut state = formals[0].to_string();
    if gated {
        let decay = f32_of(&mut s, "step/decay_t");
        let decay = s.op("Exp", &[&decay], vec![]);
        let decay = s.op("Unsqueeze", &[&decay, &minus_one], vec![]);
        state = s.op("Mul", &[&state, &decay], vec![]);
    }
    let k_col = s.op("Unsqueeze", &[&k_t, &minus_one], vec![]);
    let write_row = if delta {
        let beta = f32_of(&mut s, "step/beta_t");
        let state_t = s.op("Transpose", &[&state], vec![ints_attr("perm", &[0, 1, 3, 2])]);
        let retrieved = s.op("MatMul", &[&state_t, &k_col], vec![]);
        let retrieved = s.op("Squeeze", &[&retrieved, &minus_one], vec![]);
        let diff = s.op("Sub", &[&v_t, &retrieved], vec![]);
        let delta = s.op("Mul", &[&beta, &diff], vec![]);
        s.op("Unsqueeze", &[&delta, &minus_two], vec![])
    } else {
        s.op("Unsqueeze", &[&v_t, &minus_two], vec![])
    };
    let outer = s.op("MatMul", &[&k_col, &write_row], vec![]);
    s.node_into("Add", &[&state, &outer], &["step/state_out"], vec![]);
    let q_row = s.op("Unsqueeze", &[&q_t, &minus_two], vec![]);
    let read_state = match &read_shapes {
        Some((two, expand, read)) => {
            let unsqueezed = s.op("Unsqueeze", &["step/state_out", two], vec![]);
            let expanded = s.op("Expand", &[&unsqueezed, expand], vec![]);
            s.op("Reshape", &[&expanded, read], vec![])
        }
        None => "step/state_out".to_string(),
    };
    let read = s.op("MatMul", &[&q_row, &read_state], vec![]);
    let read = s.op("Squeeze", &[&read, &minus_two], vec![]);
    let scaled = s.op("Mul", &[&scale, &read], vec![]);
    s.node_into("CastLike", &[&scaled, "step/q_t"], &["step/output_t"], vec![]);
    let step = s.into_graph("LinearAttentionStep", &formals, &["step/state_out", "step/output_t"]);

    let mut scan_inputs: Vec<&str> = vec![&state0];
    scan_inputs.extend(scanned.iter().map(String::as_str));
    let outs = b.op_n(
        "Scan",
        &scan_inputs,
        2,
        vec![int_attr("num_scan_inputs", scanned.len() as i64), graph_attr("body", step)],
    );
    let outputs = b.op("Transpose", &[&outs[1]], vec![ints_attr("perm", &[1, 0, 2, 3])]);
    let out_shape = b.op("Concat", &[&batch, &seq, &minus_one], vec![int_attr("axis", 0)]);
    b.node_into("Reshape", &[&outputs, &out_shape], &[&output(0)], vec![]);
    let like = if call.has_input(3) { input(3) } else { q };
    b.node_into("CastLike", &[&outs[0], &like], &[&output(1)], vec![]);
    Ok(())
}
