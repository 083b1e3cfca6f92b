//! Executing the lowered control flow: blocks of layers, loops and conditionals.
//!
//! A loop re-runs its blocks once per iteration over the same value slots; a conditional
//! runs only the taken branch's block, so the other branch's layers never execute. Loop
//! values of every data type are sliced and stacked here, sized exactly per tensor.

use crate::element::{pack, Elem};
use crate::exec::CpuExecutable;
use kiln::ir::control::{Block, ConditionalRegion, LoopRegion, Step};
use kiln::{dispatch_data, BackendError, DataType, HostTensor, LayerId, LayerKind, LoopId, LoopOutputKind, TensorId};
use std::collections::HashSet;
use std::sync::Arc;

/// The state of one execution.
pub(crate) struct Run<'e> {
    exe: &'e CpuExecutable,
    pub values: Vec<Option<Arc<HostTensor>>>,
    /// The current iteration of each loop being run, innermost last.
    iterations: Vec<(LoopId, usize)>,
    max_trip_count: u64,
}

impl<'e> Run<'e> {
    pub fn new(exe: &'e CpuExecutable, values: Vec<Option<Arc<HostTensor>>>, max_trip_count: u64) -> Run<'e> {
        Run { exe, values, iterations: Vec::new(), max_trip_count }
    }

    pub fn step(&mut self, step: &Step) -> Result<(), BackendError> {
        match step {
            Step::Layer(id) => self.layer(*id),
            Step::Loop(region) => self.run_loop(region),
            Step::Conditional(region) => self.run_conditional(region),
        }
    }

    fn block(&mut self, block: &Block) -> Result<(), BackendError> {
        block.steps.iter().try_for_each(|s| self.step(s))
    }

    fn fail(&self, layer: LayerId, reason: String) -> BackendError {
        BackendError::Execution { layer: self.exe.network().layer(layer).name.clone(), reason }
    }

    fn layer(&mut self, id: LayerId) -> Result<(), BackendError> {
        let layer = self.exe.network().layer(id);
        let outputs = match layer.kind {
            LayerKind::Iterator { looping, axis, reverse } => vec![Arc::new(self.iterate(id, looping, axis, reverse)?)],
            _ => self.exe.run_layer(id, layer, &self.values).map_err(|reason| self.fail(id, reason))?,
        };
        for (t, v) in layer.outputs.iter().zip(outputs) {
            self.values[t.0] = Some(v);
        }
        Ok(())
    }

    /// The value in input `slot` of a boundary layer.
    fn input(&self, layer: LayerId, slot: usize) -> Result<Arc<HostTensor>, BackendError> {
        let net = self.exe.network();
        let t = net.layer(layer).inputs.get(slot).copied().flatten().ok_or_else(|| self.fail(layer, format!("input {slot} is missing")))?;
        self.values[t.0].clone().ok_or_else(|| self.fail(layer, format!("input tensor `{}` has no value", net.tensor(t).name)))
    }

    /// Stores the value of a boundary layer's output after checking it against the plan.
    fn set_output(&mut self, layer: LayerId, value: Arc<HostTensor>) -> Result<(), BackendError> {
        let t = self.exe.network().layer(layer).outputs[0];
        self.check_declared(layer, t, &value)?;
        self.values[t.0] = Some(value);
        Ok(())
    }

    fn check_declared(&self, layer: LayerId, t: TensorId, value: &HostTensor) -> Result<(), BackendError> {
        let desc = self.exe.network().tensor(t);
        let fits = value.dtype() == desc.dtype
            && value.shape().len() == desc.shape.rank()
            && desc.shape.dims().iter().zip(value.shape()).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
        if !fits {
            return Err(self.fail(
                layer,
                format!("`{}` would be {}{:?} but is declared {}{}", desc.name, value.dtype(), value.shape(), desc.dtype, desc.shape),
            ));
        }
        Ok(())
    }

    fn iterate(&self, id: LayerId, looping: LoopId, axis: usize, reverse: bool) -> Result<HostTensor, BackendError> {
        let x = self.input(id, 0)?;
        let Some(&(_, i)) = self.iterations.iter().rev().find(|(l, _)| *l == looping) else {
            return Err(self.fail(id, format!("the iterator runs outside loop #{}", looping.0)));
        };
        let len = *x.shape().get(axis).ok_or_else(|| self.fail(id, format!("axis {axis} is out of range")))?;
        if i >= len {
            return Err(self.fail(id, format!("iteration {i} is beyond the {len} slices of the iterated tensor along axis {axis}")));
        }
        let index = if reverse { len - 1 - i } else { i };
        slice_along(&x, axis, index).map_err(|r| self.fail(id, r))
    }

    fn run_loop(&mut self, r: &LoopRegion) -> Result<(), BackendError> {
        let net = self.exe.network();
        let count = match r.count_limit {
            Some(l) => Some(self.int_scalar(l, 0)?.max(0) as u64),
            None => None,
        };
        for &rec in &r.recurrences {
            let initial = self.input(rec, 0)?;
            self.set_output(rec, initial)?;
        }
        let lengths = r
            .outputs
            .iter()
            .map(|&o| match net.layer(o).inputs.get(1).copied().flatten() {
                Some(_) => self.int_scalar(o, 1).map(|n| Some(n.max(0) as u64)),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut stacks: Vec<Vec<Arc<HostTensor>>> = vec![Vec::new(); r.outputs.len()];
        self.iterations.push((r.id, 0));
        let mut trips: u64 = 0;
        let limit_layer = r.count_limit.or(r.while_limit);
        loop {
            if count.is_some_and(|c| trips >= c) {
                break;
            }
            if let Some(limit_layer) = limit_layer.filter(|_| trips >= self.max_trip_count) {
                return Err(self.fail(
                    limit_layer,
                    format!("loop #{} exceeds the maximum trip count of {} set when the engine was built", r.id.0, self.max_trip_count),
                ));
            }
            if let Some(last) = self.iterations.last_mut() {
                last.1 = trips as usize;
            }
            self.block(&r.condition)?;
            if let Some(w) = r.while_limit {
                if !self.bool_scalar(w, 0)? {
                    break;
                }
            }
            self.block(&r.body)?;
            for (k, &o) in r.outputs.iter().enumerate() {
                if matches!(net.layer(o).kind, LayerKind::LoopOutput { kind: LoopOutputKind::LastValue, .. }) {
                    continue;
                }
                if lengths[k].is_some_and(|len| trips >= len) {
                    return Err(self.fail(o, format!("the length {} is less than the trip count", lengths[k].unwrap_or(0))));
                }
                stacks[k].push(self.input(o, 0)?);
            }
            let nexts = r.recurrences.iter().map(|&rec| self.input(rec, 1)).collect::<Result<Vec<_>, _>>()?;
            for (&rec, next) in r.recurrences.iter().zip(nexts) {
                self.set_output(rec, next)?;
            }
            trips += 1;
        }
        self.iterations.pop();
        for ((&o, stack), length) in r.outputs.iter().zip(stacks).zip(lengths) {
            let LayerKind::LoopOutput { kind, axis, .. } = net.layer(o).kind else {
                return Err(self.fail(o, "is not a LoopOutput layer".into()));
            };
            let value = match kind {
                LoopOutputKind::LastValue => self.input(o, 0)?,
                LoopOutputKind::Concatenate | LoopOutputKind::Reverse => {
                    let length = length.unwrap_or(trips) as usize;
                    let value_tensor = net.layer(o).inputs[0].ok_or_else(|| self.fail(o, "input 0 is missing".into()))?;
                    let (dtype, slice_shape) = match stack.first() {
                        Some(v) => (v.dtype(), v.shape().to_vec()),
                        // No iteration ran: the declared shape, dynamic dims empty.
                        None => {
                            let d = net.tensor(value_tensor);
                            (d.dtype, d.shape.dims().iter().map(|d| d.fixed().unwrap_or(0)).collect())
                        }
                    };
                    let reverse = kind == LoopOutputKind::Reverse;
                    Arc::new(stack_along(&stack, axis, length, reverse, dtype, &slice_shape).map_err(|r| self.fail(o, r))?)
                }
            };
            self.set_output(o, value)?;
        }
        Ok(())
    }

    fn run_conditional(&mut self, r: &ConditionalRegion) -> Result<(), BackendError> {
        let taken = self.bool_scalar(r.condition, 0)?;
        for &input in &r.inputs {
            let value = self.input(input, 0)?;
            self.set_output(input, value)?;
        }
        self.block(if taken { &r.then_branch } else { &r.else_branch })?;
        for &o in &r.outputs {
            let value = self.input(o, if taken { 0 } else { 1 })?;
            self.set_output(o, value)?;
        }
        Ok(())
    }

    fn int_scalar(&self, layer: LayerId, slot: usize) -> Result<i64, BackendError> {
        let v = self.input(layer, slot)?;
        match v.to_i64_vec().as_deref() {
            Some([n]) => Ok(*n),
            _ => Err(self.fail(layer, format!("input {slot} must be one integer, got {}{:?}", v.dtype(), v.shape()))),
        }
    }

    fn bool_scalar(&self, layer: LayerId, slot: usize) -> Result<bool, BackendError> {
        let v = self.input(layer, slot)?;
        match bool::view(v.data()) {
            Some([b]) => Ok(*b),
            _ => Err(self.fail(layer, format!("input {slot} must be one bool, got {}{:?}", v.dtype(), v.shape()))),
        }
    }
}

/// The sub-tensor at `index` along `axis` (the axis removed).
fn slice_along(x: &HostTensor, axis: usize, index: usize) -> Result<HostTensor, String> {
    let shape = x.shape();
    let outer: usize = shape[..axis].iter().product();
    let len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape.remove(axis);
    let data = dispatch_data!(x.data(), v => {
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            let start = (o * len + index) * inner;
            out.extend_from_slice(&v[start..start + inner]);
        }
        pack(out)
    });
    HostTensor::new(out_shape, data).map_err(|e| e.to_string())
}

/// Stacks `parts` along a new axis `axis` of length `length` (at least `parts.len()`),
/// last part first when `reverse`; the positions past the parts hold zeros.
fn stack_along(
    parts: &[Arc<HostTensor>],
    axis: usize,
    length: usize,
    reverse: bool,
    dtype: DataType,
    slice_shape: &[usize],
) -> Result<HostTensor, String> {
    if axis > slice_shape.len() {
        return Err(format!("axis {axis} is out of range for stacking rank-{} values", slice_shape.len()));
    }
    if let Some(odd) = parts.iter().find(|p| p.shape() != slice_shape || p.dtype() != dtype) {
        return Err(format!(
            "the stacked value changes between iterations: {}{:?} then {}{:?}",
            dtype,
            slice_shape,
            odd.dtype(),
            odd.shape()
        ));
    }
    let outer: usize = slice_shape[..axis].iter().product();
    let inner: usize = slice_shape[axis..].iter().product();
    let mut shape = slice_shape.to_vec();
    shape.insert(axis, length);
    let mut out = HostTensor::zeros(dtype, shape.clone()).into_data();
    let n = parts.len();
    dispatch_data!(&mut out, v => place_parts(v, parts, outer, inner, length, reverse, n))?;
    HostTensor::new(shape, out).map_err(|e| e.to_string())
}

fn place_parts<T: Elem>(
    dst: &mut [T],
    parts: &[Arc<HostTensor>],
    outer: usize,
    inner: usize,
    length: usize,
    reverse: bool,
    n: usize,
) -> Result<(), String> {
    for (j, part) in parts.iter().enumerate() {
        let src = T::view(part.data()).ok_or_else(|| format!("a stacked value is {}, not {}", part.dtype(), T::DTYPE))?;
        let at = if reverse { n - 1 - j } else { j };
        for o in 0..outer {
            let start = (o * length + at) * inner;
            dst[start..start + inner].copy_from_slice(&src[o * inner..(o + 1) * inner]);
        }
    }
    Ok(())
}

/// Per top-level step, the tensors no later top-level step reads (network outputs stay).
pub(crate) fn top_level_frees(network: &kiln::Network, steps: &[Step]) -> Vec<Vec<usize>> {
    let reads = |step: &Step| -> Vec<usize> {
        let block = Block { steps: vec![step.clone()] };
        let mut out: Vec<usize> = Vec::new();
        for l in block.layers() {
            let layer = network.layer(l);
            out.extend(layer.inputs.iter().flatten().map(|t| t.0));
            out.extend(layer.outputs.iter().map(|t| t.0));
        }
        out
    };
    let mut last_use: Vec<Option<usize>> = vec![None; network.tensors().len()];
    let per_step: Vec<Vec<usize>> = steps.iter().map(reads).collect();
    for (i, ts) in per_step.iter().enumerate() {
        for &t in ts {
            last_use[t] = Some(i);
        }
    }
    let outputs: HashSet<usize> = network.outputs().iter().map(|o| o.0).collect();
    per_step
        .iter()
        .enumerate()
        .map(|(i, ts)| {
            let mut seen = HashSet::new();
            ts.iter().copied().filter(|&t| last_use[t] == Some(i) && !outputs.contains(&t) && seen.insert(t)).collect()
        })
        .collect()
}
