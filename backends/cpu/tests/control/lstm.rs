//! An LSTM built with the loop API, as sampleCharRNN's `addLSTMCell` does (seeds §10.5),
//! checked against a direct computation.

use crate::common::*;
use kiln::{
    ActivationKind, DataType, ElementwiseOp, LoopOutputKind, MatrixOp, Network, TensorData, TensorId, TripLimitKind,
};

const SEQ: usize = 4;
const IN: usize = 2;
const HID: usize = 3;

fn weights(len: usize, seed: f32) -> Vec<f32> {
    (0..len).map(|i| (i as f32 * 0.37 + seed).sin() * 0.5).collect()
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The expected final hidden state and the per-step hidden states, gates ordered i, f, c, o.
fn reference(x: &[f32], w: &[f32], r: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (mut h, mut c) = (vec![0f32; HID], vec![0f32; HID]);
    let mut all = Vec::new();
    for t in 0..SEQ {
        let xt = &x[t * IN..(t + 1) * IN];
        let gate = |g: usize, j: usize| {
            let row = g * HID + j;
            let wx: f32 = (0..IN).map(|k| w[row * IN + k] * xt[k]).sum();
            let rh: f32 = (0..HID).map(|k| r[row * HID + k] * h[k]).sum();
            wx + rh + b[row]
        };
        let mut next_h = vec![0f32; HID];
        for j in 0..HID {
            let (i, f, g, o) = (sigmoid(gate(0, j)), sigmoid(gate(1, j)), gate(2, j).tanh(), sigmoid(gate(3, j)));
            c[j] = f * c[j] + i * g;
            next_h[j] = o * c[j].tanh();
        }
        h = next_h;
        all.extend_from_slice(&h);
    }
    (h, all)
}

fn gate(n: &mut Network, gates: TensorId, index: usize, kind: ActivationKind) -> TensorId {
    let start = (index * HID) as i64;
    let slice = n.add_slice(gates, &[start], &[start + HID as i64], &[1], &[1]).unwrap();
    let act = n.add_activation(n.output(slice, 0), kind).unwrap();
    n.output(act, 0)
}

#[test]
fn lstm_cell_with_the_loop_api_matches_a_direct_computation() {
    let (w, r, b) = (weights(4 * HID * IN, 0.1), weights(4 * HID * HID, 0.7), weights(4 * HID, 1.3));
    let x: Vec<f32> = (0..SEQ * IN).map(|i| (i as f32 * 0.5).cos()).collect();
    let mut n = Network::new("lstm");
    let data = input(&mut n, "data", DataType::F32, &[SEQ, 1, IN]);
    let seq_len = constant(&mut n, &[], TensorData::I32(vec![SEQ as i32]));
    let h0 = constant(&mut n, &[1, HID], TensorData::F32(vec![0.0; HID]));
    let c0 = constant(&mut n, &[1, HID], TensorData::F32(vec![0.0; HID]));
    let w_t = constant(&mut n, &[4 * HID, IN], TensorData::F32(w.clone()));
    let r_t = constant(&mut n, &[4 * HID, HID], TensorData::F32(r.clone()));
    let b_t = constant(&mut n, &[1, 4 * HID], TensorData::F32(b.clone()));

    let looping = n.add_loop();
    n.add_trip_limit(looping, seq_len, TripLimitKind::Count).unwrap();
    let xt = n.add_iterator(looping, data, 0, false).unwrap();
    let hidden = n.add_recurrence(looping, h0).unwrap();
    let cell = n.add_recurrence(looping, c0).unwrap();
    let mm_input = n.add_matrix_multiply(n.output(xt, 0), MatrixOp::None, w_t, MatrixOp::Transpose).unwrap();
    let mm_hidden = n.add_matrix_multiply(n.output(hidden, 0), MatrixOp::None, r_t, MatrixOp::Transpose).unwrap();
    let mm = n.add_elementwise(n.output(mm_input, 0), n.output(mm_hidden, 0), ElementwiseOp::Sum).unwrap();
    let gates = n.add_elementwise(n.output(mm, 0), b_t, ElementwiseOp::Sum).unwrap();
    let gates = n.output(gates, 0);
    let i = gate(&mut n, gates, 0, ActivationKind::Sigmoid);
    let f = gate(&mut n, gates, 1, ActivationKind::Sigmoid);
    let g = gate(&mut n, gates, 2, ActivationKind::Tanh);
    let o = gate(&mut n, gates, 3, ActivationKind::Sigmoid);
    let kept = n.add_elementwise(f, n.output(cell, 0), ElementwiseOp::Prod).unwrap();
    let added = n.add_elementwise(i, g, ElementwiseOp::Prod).unwrap();
    let c_next = n.add_elementwise(n.output(kept, 0), n.output(added, 0), ElementwiseOp::Sum).unwrap();
    let c_next = n.output(c_next, 0);
    let c_tanh = n.add_activation(c_next, ActivationKind::Tanh).unwrap();
    let h_next = n.add_elementwise(o, n.output(c_tanh, 0), ElementwiseOp::Prod).unwrap();
    let h_next = n.output(h_next, 0);
    n.set_recurrence_next(hidden, h_next).unwrap();
    n.set_recurrence_next(cell, c_next).unwrap();
    let all = n.add_loop_output(looping, h_next, LoopOutputKind::Concatenate, 0).unwrap();
    n.set_loop_output_length(all, seq_len).unwrap();
    let last = n.add_loop_output(looping, n.output(hidden, 0), LoopOutputKind::LastValue, 0).unwrap();
    let (all, last) = (n.output(all, 0), n.output(last, 0));
    n.mark_output(all).unwrap();
    n.mark_output(last).unwrap();

    let outs = try_run(&n, &[("data", f32s(&[SEQ, 1, IN], &x))]).unwrap();
    let (want_last, want_all) = reference(&x, &w, &r, &b);
    let got_all = &outs[&n.tensor(all).name];
    assert_eq!(got_all.shape(), [SEQ, 1, HID]);
    for (g, w) in values(got_all).iter().zip(&want_all) {
        assert!((*g as f32 - w).abs() < 1e-5, "{g} vs {w}");
    }
    for (g, w) in values(&outs[&n.tensor(last).name]).iter().zip(&want_last) {
        assert!((*g as f32 - w).abs() < 1e-5, "{g} vs {w}");
    }
}
