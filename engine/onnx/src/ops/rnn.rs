//! Recurrent layers: ONNX LSTM, GRU and RNN, lowered onto kiln's loop layers.
//!
//! Each direction is one COUNT loop over the sequence axis: an iterator yields `x_t`
//! (backwards for the reverse direction), recurrences carry `H` (and `C` for LSTM), and the
//! per-step `H` is stacked by a CONCATENATE (forward) or REVERSE (reverse) loop output, so
//! `Y` is in time order either way. The gate weights are split per gate outside the loop
//! (a reshape to `[directions, gates, hidden, …]` and two gathers), so each gate is its own
//! pair of matrix products inside the loop. With `sequence_lens`, a step at a time index
//! past a batch entry's length keeps that entry's state and writes zeros to `Y`.

use super::build::{binary, with_scalar};
use super::Registry;
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::proto::attribute_proto::AttributeType;
use kiln::{
    ActivationKind, DataType, ElementwiseOp, HostTensor, LayerKind, LoopId, LoopOutputKind, MatrixOp, ShuffleParams,
    TensorData, TensorId, TripLimitKind,
};

pub(super) fn register(r: &mut Registry) {
    r.add("LSTM", &[1, 7, 14, 22], lstm);
    r.add("GRU", &[1, 3, 7, 14, 22], gru);
    r.add("RNN", &[1, 7, 14, 22], rnn);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
    Rnn,
}

impl Cell {
    /// Gates stacked in W, R and half of B.
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn => 1,
        }
    }

    /// Activation functions per direction and their defaults.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Rnn => &["Tanh"],
        }
    }
}

/// One activation function of the cell, with its alpha and beta resolved.
#[derive(Clone, Copy, Debug)]
enum Act {
    Kind(ActivationKind),
    /// `alpha * x + beta`.
    Affine { alpha: f32, beta: f32 },
}

fn lstm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    import(ctx, Cell::Lstm)
}

fn gru(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    import(ctx, Cell::Gru)
}

fn rnn(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    import(ctx, Cell::Rnn)
}

/// The `activations` attribute (a list of strings), which `Attributes` has no accessor for.
fn activation_names(ctx: &NodeContext) -> Result<Option<Vec<String>>, ImportError> {
    let Some(attr) = ctx.node.attribute.iter().find(|a| a.name() == "activations") else {
        return Ok(None);
    };
    let declared = AttributeType::try_from(attr.r#type.unwrap_or(0)).unwrap_or(AttributeType::Undefined);
    if !matches!(declared, AttributeType::Strings | AttributeType::Undefined) {
        return Err(ctx.invalid(format!("attribute `activations` must be STRINGS, got {}", declared.as_str_name())));
    }
    attr.strings
        .iter()
        .map(|s| {
            String::from_utf8(s.clone()).map_err(|_| ctx.invalid("attribute `activations` is not valid UTF-8"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The activation functions, `per` for each of `directions`, consuming `activation_alpha`
/// and `activation_beta` in order by the functions that take them.
fn activations(ctx: &NodeContext, cell: Cell, directions: usize) -> Result<Vec<Act>, ImportError> {
    let per = cell.default_activations().len();
    let names = match activation_names(ctx)? {
        Some(names) => names,
        None => (0..directions).flat_map(|_| cell.default_activations().iter().map(|s| s.to_string())).collect(),
    };
    if names.len() != per * directions {
        return Err(ctx.invalid(format!(
            "attribute `activations` lists {} functions; a {} with {directions} direction(s) needs {}",
            names.len(),
            ctx.op_type(),
            per * directions
        )));
    }
    let alphas = ctx.attrs.floats("activation_alpha")?.unwrap_or(&[]);
    let betas = ctx.attrs.floats("activation_beta")?.unwrap_or(&[]);
    let (mut ai, mut bi) = (alphas.iter().copied(), betas.iter().copied());
    let mut alpha = |default: f32| ai.next().unwrap_or(default);
    let mut out = Vec::with_capacity(names.len());
    for name in &names {
        let act = match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Kind(ActivationKind::Relu),
            "tanh" => Act::Kind(ActivationKind::Tanh),
            "sigmoid" => Act::Kind(ActivationKind::Sigmoid),
            "softsign" => Act::Kind(ActivationKind::Softsign),
            "softplus" => Act::Kind(ActivationKind::Softplus),
            "leakyrelu" => Act::Kind(ActivationKind::LeakyRelu { alpha: alpha(0.01) }),
            "thresholdedrelu" => Act::Kind(ActivationKind::ThresholdedRelu { alpha: alpha(1.0) }),
            "elu" => Act::Kind(ActivationKind::Elu { alpha: alpha(1.0) }),
            "hardsigmoid" => {
                let a = alpha(0.2);
                Act::Kind(ActivationKind::HardSigmoid { alpha: a, beta: bi.next().unwrap_or(0.5) })
            }
            "scaledtanh" => {
                let a = alpha(1.0);
                Act::Kind(ActivationKind::ScaledTanh { alpha: a, beta: bi.next().unwrap_or(1.0) })
            }
            "affine" => {
                let a = alpha(1.0);
                Act::Affine { alpha: a, beta: bi.next().unwrap_or(0.0) }
            }
            other => {
                return Err(ctx.unsupported(format!("the activation function `{other}` in attribute `activations`")))
            }
        };
        out.push(act);
    }
    Ok(out)
}

/// Everything about the node that the per-direction loops share.
struct Spec {
    cell: Cell,
    dtype: DataType,
    acts: Vec<Act>,
    clip: Option<f32>,
    input_forget: bool,
    linear_before_reset: bool,
    /// X as `[seq, batch, input]`.
    x: TensorId,
    w: TensorId,
    r: TensorId,
    b: Option<TensorId>,
    p: Option<TensorId>,
    /// `[directions, batch, hidden]` each.
    h0: Option<TensorId>,
    c0: Option<TensorId>,
    /// `[batch, 1]` i64.
    lens: Option<TensorId>,
}

fn transpose(ctx: &mut NodeContext, part: &str, t: TensorId, perm: Vec<usize>) -> Result<TensorId, ImportError> {
    ctx.shuffle(part, t, ShuffleParams { first_transpose: perm, ..Default::default() })
}

/// A new size-1 axis: a trailing 1 appended by `reshape`, then moved by `perm`.
fn unsqueeze(ctx: &mut NodeContext, part: &str, t: TensorId, reshape: Vec<i64>, perm: Vec<usize>) -> Result<TensorId, ImportError> {
    let params = ShuffleParams { reshape: Some(reshape), second_transpose: perm, zero_is_placeholder: true, ..Default::default() };
    ctx.shuffle(part, t, params)
}

fn index(ctx: &mut NodeContext, part: &str, i: usize) -> Result<TensorId, ImportError> {
    let value = HostTensor::scalar(TensorData::I64(vec![i as i64])).map_err(|e| ctx.invalid(e.to_string()))?;
    ctx.constant(part, value)
}

/// `t[i]` along axis 0 (the axis dropped).
fn pick(ctx: &mut NodeContext, part: &str, t: TensorId, i: usize) -> Result<TensorId, ImportError> {
    let idx = index(ctx, &format!("{part} index"), i)?;
    ctx.add(part, LayerKind::Gather { mode: kiln::GatherMode::Default { axis: 0 } }, &[t, idx])
}

fn check_rank(ctx: &NodeContext, t: TensorId, rank: usize, what: &str) -> Result<(), ImportError> {
    if ctx.rank(t) != rank {
        return Err(ctx.invalid(format!("input {what} must have rank {rank}, got {}", ctx.rank(t))));
    }
    Ok(())
}

fn import(ctx: &mut NodeContext, cell: Cell) -> Result<Vec<TensorId>, ImportError> {
    let direction = ctx.attrs.string("direction", "forward")?;
    let dirs: Vec<bool> = match direction {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => {
            return Err(ctx.invalid(format!(
                "attribute `direction` must be forward, reverse or bidirectional, got `{other}`"
            )))
        }
    };
    let layout = ctx.attrs.int("layout", 0)?;
    if !(layout == 0 || layout == 1) {
        return Err(ctx.invalid(format!("attribute `layout` must be 0 or 1, got {layout}")));
    }
    let acts = activations(ctx, cell, dirs.len())?;
    let clip = ctx.attrs.opt_float("clip")?;
    if let Some(c) = clip {
        if c.is_nan() || c <= 0.0 {
            return Err(ctx.invalid(format!("attribute `clip` must be positive, got {c}")));
        }
    }
    let input_forget = cell == Cell::Lstm && ctx.attrs.flag("input_forget", false)?;
    let linear_before_reset = cell == Cell::Gru && ctx.attrs.flag("linear_before_reset", false)?;
    let (x, w, r) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    check_rank(ctx, x, 3, "X")?;
    check_rank(ctx, w, 3, "W")?;
    check_rank(ctx, r, 3, "R")?;
    if let Some(d) = ctx.dims(w)[0].fixed() {
        if d != dirs.len() {
            return Err(ctx.invalid(format!("W has {d} directions; direction `{direction}` needs {}", dirs.len())));
        }
    }
    let dtype = ctx.dtype(x);
    let x = if layout == 1 { transpose(ctx, "X time major", x, vec![1, 0, 2])? } else { x };
    let state = |ctx: &mut NodeContext, i: usize, what: &str| -> Result<Option<TensorId>, ImportError> {
        let Some(t) = ctx.opt_input(i) else { return Ok(None) };
        check_rank(ctx, t, 3, what)?;
        Ok(Some(if layout == 1 { transpose(ctx, &format!("{what} direction major"), t, vec![1, 0, 2])? } else { t }))
    };
    let h0 = state(ctx, 5, "initial_h")?;
    let c0 = if cell == Cell::Lstm { state(ctx, 6, "initial_c")? } else { None };
    let lens = match ctx.opt_input(4) {
        Some(l) => {
            check_rank(ctx, l, 1, "sequence_lens")?;
            let l = ctx.cast("sequence_lens i64", l, DataType::I64)?;
            Some(ctx.reshape("sequence_lens column", l, vec![-1, 1])?)
        }
        None => None,
    };
    let p = if cell == Cell::Lstm { ctx.opt_input(7) } else { None };
    let spec = Spec {
        cell,
        dtype,
        acts,
        clip,
        input_forget,
        linear_before_reset,
        x,
        w,
        r,
        b: ctx.opt_input(3),
        p,
        h0,
        c0,
        lens,
    };
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for (d, &reverse) in dirs.iter().enumerate() {
        let (y, h, c) = direction_loop(ctx, &spec, d, reverse)?;
        ys.push(unsqueeze(ctx, &format!("d{d} Y"), y, vec![0, 0, 0, 1], vec![0, 3, 1, 2])?);
        hs.push(unsqueeze(ctx, &format!("d{d} Y_h"), h, vec![0, 0, 1], vec![2, 0, 1])?);
        if let Some(c) = c {
            cs.push(unsqueeze(ctx, &format!("d{d} Y_c"), c, vec![0, 0, 1], vec![2, 0, 1])?);
        }
    }
    let join = |ctx: &mut NodeContext, part: &str, ts: Vec<TensorId>, axis: usize| -> Result<TensorId, ImportError> {
        if ts.len() == 1 {
            return Ok(ts[0]);
        }
        ctx.add(part, LayerKind::Concatenation { axis }, &ts)
    };
    let mut y = join(ctx, "Y directions", ys, 1)?;
    let mut h = join(ctx, "Y_h directions", hs, 0)?;
    let mut c = if cs.is_empty() { None } else { Some(join(ctx, "Y_c directions", cs, 0)?) };
    if layout == 1 {
        y = transpose(ctx, "Y batch major", y, vec![2, 0, 1, 3])?;
        h = transpose(ctx, "Y_h batch major", h, vec![1, 0, 2])?;
        c = c.map(|c| transpose(ctx, "Y_c batch major", c, vec![1, 0, 2])).transpose()?;
    }
    let mut outs = vec![y, h];
    outs.extend(c);
    Ok(outs)
}

/// `act(x)`, after clipping `x` to `[-clip, clip]` when the node sets `clip`.
fn apply(ctx: &mut NodeContext, spec: &Spec, part: &str, act: Act, x: TensorId) -> Result<TensorId, ImportError> {
    let x = match spec.clip {
        Some(c) => {
            let kind = ActivationKind::Clip { min: -c, max: c };
            ctx.add(&format!("{part} clip"), LayerKind::Activation { kind }, &[x])?
        }
        None => x,
    };
    match act {
        Act::Kind(kind) => ctx.add(part, LayerKind::Activation { kind }, &[x]),
        Act::Affine { alpha, beta } => {
            let scaled = with_scalar(ctx, &format!("{part} scale"), ElementwiseOp::Prod, x, f64::from(alpha))?;
            with_scalar(ctx, part, ElementwiseOp::Sum, scaled, f64::from(beta))
        }
    }
}

/// `a · bᵀ` for `a [batch, k]` and `b [n, k]`.
fn times_t(ctx: &mut NodeContext, part: &str, a: TensorId, b: TensorId) -> Result<TensorId, ImportError> {
    ctx.add(part, LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose }, &[a, b])
}

/// Per-gate pieces of one direction's weights.
struct Weights {
    /// `[hidden, input]` per gate.
    w: Vec<TensorId>,
    /// `[hidden, hidden]` per gate.
    r: Vec<TensorId>,
    /// `[hidden]` per gate: input bias, recurrence bias (`None` without B).
    wb: Vec<Option<TensorId>>,
    rb: Vec<Option<TensorId>>,
    /// LSTM peepholes i, o, f (`[hidden]` each).
    p: Vec<TensorId>,
}

fn weights(ctx: &mut NodeContext, spec: &Spec, d: usize) -> Result<Weights, ImportError> {
    let g = spec.cell.gates() as i64;
    let split = |ctx: &mut NodeContext, name: &str, t: TensorId, parts: i64| -> Result<Vec<TensorId>, ImportError> {
        let dims = if ctx.rank(t) == 3 {
            let last = ctx.dims(t)[2]
                .fixed()
                .ok_or_else(|| ctx.unsupported(format!("input {name} with a dynamic last dim")))?;
            vec![0, parts, -1, last as i64]
        } else {
            vec![0, parts, -1]
        };
        let gates = ctx.reshape(&format!("d{d} {name} gates"), t, dims)?;
        let mine = pick(ctx, &format!("d{d} {name}"), gates, d)?;
        (0..parts as usize).map(|k| pick(ctx, &format!("d{d} {name} gate {k}"), mine, k)).collect()
    };
    let w = split(ctx, "W", spec.w, g)?;
    let r = split(ctx, "R", spec.r, g)?;
    let (wb, rb) = match spec.b {
        Some(b) => {
            check_rank(ctx, b, 2, "B")?;
            let all = split(ctx, "B", b, 2 * g)?;
            let (wb, rb) = all.split_at(g as usize);
            (wb.iter().map(|&t| Some(t)).collect(), rb.iter().map(|&t| Some(t)).collect())
        }
        None => (vec![None; g as usize], vec![None; g as usize]),
    };
    let p = match spec.p {
        Some(p) => {
            check_rank(ctx, p, 2, "P")?;
            split(ctx, "P", p, 3)?
        }
        None => Vec::new(),
    };
    Ok(Weights { w, r, wb, rb, p })
}

fn add_opt(ctx: &mut NodeContext, part: &str, a: TensorId, b: Option<TensorId>) -> Result<TensorId, ImportError> {
    match b {
        Some(b) => binary(ctx, part, ElementwiseOp::Sum, a, b),
        None => Ok(a),
    }
}

/// The initial state of direction `d`, or zeros `[batch, hidden]`.
fn initial(ctx: &mut NodeContext, spec: &Spec, init: Option<TensorId>, d: usize, what: &str) -> Result<TensorId, ImportError> {
    if let Some(t) = init {
        return pick(ctx, &format!("d{d} {what}"), t, d);
    }
    let batch = ctx.dim_of(&format!("d{d} {what} batch"), spec.x, 1)?;
    let hidden = ctx.dim_of(&format!("d{d} {what} hidden"), spec.r, 2)?;
    let shape = ctx.add(&format!("d{d} {what} shape"), LayerKind::Concatenation { axis: 0 }, &[batch, hidden])?;
    let zero = ctx.scalar(&format!("d{d} {what} zero"), spec.dtype, 0.0)?;
    ctx.add(&format!("d{d} {what} zeros"), LayerKind::Expand, &[zero, shape])
}

fn loop_output(ctx: &mut NodeContext, looping: LoopId, t: TensorId, kind: LoopOutputKind) -> Result<TensorId, ImportError> {
    let layer = ctx.net.add_loop_output(looping, t, kind, 0).map_err(|e| ctx.network_error(e))?;
    Ok(ctx.net.output(layer, 0))
}

/// One direction: `Y [seq, batch, hidden]`, `Y_h [batch, hidden]`, `Y_c` for LSTM.
fn direction_loop(
    ctx: &mut NodeContext,
    spec: &Spec,
    d: usize,
    reverse: bool,
) -> Result<(TensorId, TensorId, Option<TensorId>), ImportError> {
    let wt = weights(ctx, spec, d)?;
    let acts = spec.cell.default_activations().len();
    let acts = spec.acts[d * acts..(d + 1) * acts].to_vec();
    let h0 = initial(ctx, spec, spec.h0, d, "initial_h")?;
    let c0 = if spec.cell == Cell::Lstm { Some(initial(ctx, spec, spec.c0, d, "initial_c")?) } else { None };
    let seq = ctx.dim_of(&format!("d{d} sequence length"), spec.x, 0)?;
    let seq = ctx.reshape(&format!("d{d} trip count"), seq, vec![])?;
    // Biases that always sum are added once, outside the loop.
    let mut bias = Vec::with_capacity(wt.w.len());
    for k in 0..wt.w.len() {
        let keep_apart = spec.cell == Cell::Gru && k == 2;
        bias.push(match (wt.wb[k], wt.rb[k]) {
            (Some(a), Some(b)) if !keep_apart => Some(binary(ctx, &format!("d{d} bias {k}"), ElementwiseOp::Sum, a, b)?),
            (a, _) => a,
        });
    }
    let looping = ctx.net.add_loop();
    ctx.net.add_trip_limit(looping, seq, TripLimitKind::Count).map_err(|e| ctx.network_error(e))?;
    let it = ctx.net.add_iterator(looping, spec.x, 0, reverse).map_err(|e| ctx.network_error(e))?;
    let x = ctx.net.output(it, 0);
    let h_rec = ctx.net.add_recurrence(looping, h0).map_err(|e| ctx.network_error(e))?;
    let h_prev = ctx.net.output(h_rec, 0);
    let c_rec = c0.map(|c| ctx.net.add_recurrence(looping, c).map_err(|e| ctx.network_error(e))).transpose()?;
    let c_prev = c_rec.map(|r| ctx.net.output(r, 0));
    let p = |s: &str| format!("d{d} {s}");
    // x·Wₖᵀ + h·Rₖᵀ + bias for gate k.
    let gate = |ctx: &mut NodeContext, k: usize| -> Result<TensorId, ImportError> {
        let xw = times_t(ctx, &p(&format!("x W{k}")), x, wt.w[k])?;
        let hr = times_t(ctx, &p(&format!("h R{k}")), h_prev, wt.r[k])?;
        let sum = binary(ctx, &p(&format!("gate {k}")), ElementwiseOp::Sum, xw, hr)?;
        add_opt(ctx, &p(&format!("gate {k} bias")), sum, bias[k])
    };
    let mul = |ctx: &mut NodeContext, part: &str, a: TensorId, b: TensorId| binary(ctx, part, ElementwiseOp::Prod, a, b);
    let (h_new, c_new) = match spec.cell {
        Cell::Rnn => {
            let pre = gate(ctx, 0)?;
            (apply(ctx, spec, &p("H"), acts[0], pre)?, None)
        }
        Cell::Lstm => {
            let c_prev = c_prev.ok_or_else(|| ctx.invalid("LSTM lost its cell state"))?;
            let (gi, go, gf, gc) = (gate(ctx, 0)?, gate(ctx, 1)?, gate(ctx, 2)?, gate(ctx, 3)?);
            let peep = |ctx: &mut NodeContext, part: &str, g: TensorId, j: usize, c: TensorId| -> Result<TensorId, ImportError> {
                match wt.p.get(j) {
                    Some(&pj) => {
                        let pc = mul(ctx, &format!("{part} peephole"), pj, c)?;
                        binary(ctx, &format!("{part} with peephole"), ElementwiseOp::Sum, g, pc)
                    }
                    None => Ok(g),
                }
            };
            let gi = peep(ctx, &p("i"), gi, 0, c_prev)?;
            let i = apply(ctx, spec, &p("i"), acts[0], gi)?;
            let f = if spec.input_forget {
                let one = ctx.scalar(&p("one"), spec.dtype, 1.0)?;
                binary(ctx, &p("f"), ElementwiseOp::Sub, one, i)?
            } else {
                let gf = peep(ctx, &p("f"), gf, 2, c_prev)?;
                apply(ctx, spec, &p("f"), acts[0], gf)?
            };
            let c = apply(ctx, spec, &p("c"), acts[1], gc)?;
            let fc = mul(ctx, &p("f C"), f, c_prev)?;
            let ic = mul(ctx, &p("i c"), i, c)?;
            let c_new = binary(ctx, &p("C"), ElementwiseOp::Sum, fc, ic)?;
            let go = peep(ctx, &p("o"), go, 1, c_new)?;
            let o = apply(ctx, spec, &p("o"), acts[0], go)?;
            let hc = apply(ctx, spec, &p("h(C)"), acts[2], c_new)?;
            (mul(ctx, &p("H"), o, hc)?, Some(c_new))
        }
        Cell::Gru => {
            let (gz, gr) = (gate(ctx, 0)?, gate(ctx, 1)?);
            let z = apply(ctx, spec, &p("z"), acts[0], gz)?;
            let r = apply(ctx, spec, &p("r"), acts[0], gr)?;
            let xw = times_t(ctx, &p("x W2"), x, wt.w[2])?;
            let xw = add_opt(ctx, &p("x W2 bias"), xw, wt.wb[2])?;
            let pre = if spec.linear_before_reset {
                let hr = times_t(ctx, &p("h R2"), h_prev, wt.r[2])?;
                let hr = add_opt(ctx, &p("h R2 bias"), hr, wt.rb[2])?;
                let rhr = mul(ctx, &p("r (h R2)"), r, hr)?;
                binary(ctx, &p("gate 2"), ElementwiseOp::Sum, xw, rhr)?
            } else {
                let rh = mul(ctx, &p("r h"), r, h_prev)?;
                let rhr = times_t(ctx, &p("(r h) R2"), rh, wt.r[2])?;
                let rhr = add_opt(ctx, &p("(r h) R2 bias"), rhr, wt.rb[2])?;
                binary(ctx, &p("gate 2"), ElementwiseOp::Sum, xw, rhr)?
            };
            let hh = apply(ctx, spec, &p("h"), acts[1], pre)?;
            // H = (1 - z) h + z H_prev = h + z (H_prev - h)
            let diff = binary(ctx, &p("H_prev - h"), ElementwiseOp::Sub, h_prev, hh)?;
            let zd = mul(ctx, &p("z (H_prev - h)"), z, diff)?;
            (binary(ctx, &p("H"), ElementwiseOp::Sum, hh, zd)?, None)
        }
    };
    let (h_next, c_next, y_step) = match spec.lens {
        None => (h_new, c_new, h_new),
        Some(lens) => {
            // The time index of this step: the iteration, or seq - 1 - iteration in reverse.
            let zero = index(ctx, &p("step 0"), 0)?;
            let step_rec = ctx.net.add_recurrence(looping, zero).map_err(|e| ctx.network_error(e))?;
            let step = ctx.net.output(step_rec, 0);
            let one = index(ctx, &p("step 1"), 1)?;
            let next = binary(ctx, &p("step next"), ElementwiseOp::Sum, step, one)?;
            ctx.net.set_recurrence_next(step_rec, next).map_err(|e| ctx.network_error(e))?;
            let seq64 = ctx.cast(&p("trip count i64"), seq, DataType::I64)?;
            let time = if reverse {
                let last = binary(ctx, &p("last time"), ElementwiseOp::Sub, seq64, one)?;
                binary(ctx, &p("time"), ElementwiseOp::Sub, last, step)?
            } else {
                step
            };
            let valid = binary(ctx, &p("valid"), ElementwiseOp::Less, time, lens)?;
            let h_next = ctx.add(&p("H kept"), LayerKind::Select, &[valid, h_new, h_prev])?;
            let c_next = match (c_new, c_prev) {
                (Some(cn), Some(cp)) => Some(ctx.add(&p("C kept"), LayerKind::Select, &[valid, cn, cp])?),
                _ => None,
            };
            let zero = ctx.scalar(&p("Y padding"), spec.dtype, 0.0)?;
            let y_step = ctx.add(&p("Y step"), LayerKind::Select, &[valid, h_new, zero])?;
            (h_next, c_next, y_step)
        }
    };
    ctx.net.set_recurrence_next(h_rec, h_next).map_err(|e| ctx.network_error(e))?;
    if let (Some(r), Some(c)) = (c_rec, c_next) {
        ctx.net.set_recurrence_next(r, c).map_err(|e| ctx.network_error(e))?;
    }
    let kind = if reverse { LoopOutputKind::Reverse } else { LoopOutputKind::Concatenate };
    let y = loop_output(ctx, looping, y_step, kind)?;
    let h = loop_output(ctx, looping, h_prev, LoopOutputKind::LastValue)?;
    let c = c_prev.map(|c| loop_output(ctx, looping, c, LoopOutputKind::LastValue)).transpose()?;
    Ok((y, h, c))
}
