//! The control-flow plan interpreter every backend shares.
//!
//! A backend supplies its values (host tensors on cpu, device buffers on a GPU) and its
//! kernels through [`Machine`]; this module walks the engine's lowered [`ControlFlow`]:
//! blocks of layers, loops re-running their blocks over the same value slots, and
//! conditionals running only the taken branch. Only trip counts and conditions are read
//! back to the host, so a GPU backend synchronises nowhere else.

use crate::error::BackendError;
use crate::ir::control::{Block, ConditionalRegion, ControlFlow, LoopRegion, Step};
use crate::ir::dtype::DataType;
use crate::ir::layer::{LayerKind, LoopId, LoopOutputKind};
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::tensor::{HostTensor, TensorData};
use super::machine::{KernelError, Machine};
use std::collections::HashSet;
use std::sync::Arc;

/// Runs `plan` on `inputs` (network-input order), freeing after each top-level step the
/// tensors `frees` names (see [`top_level_frees`]); returns the outputs in network-output
/// order. Inputs are checked against the declared types and fixed dims.
pub fn run_plan<M: Machine>(
    machine: &M,
    plan: &ControlFlow,
    frees: &[Vec<usize>],
    inputs: Vec<M::Value>,
) -> Result<Vec<M::Value>, BackendError> {
    let net = machine.network();
    let boundary = |reason: String| BackendError::Execution { layer: "(network inputs)".into(), reason };
    if inputs.len() != net.inputs().len() {
        return Err(boundary(format!("{} inputs given, the network takes {}", inputs.len(), net.inputs().len())));
    }
    let mut run = Interpreter {
        machine,
        values: vec![None; net.tensors().len()],
        iterations: Vec::new(),
        max_trip_count: plan.max_trip_count,
        run_trips: 0,
        max_run_trips: plan.max_run_trips(),
        memory_budget: plan.max_memory_bytes.unwrap_or(u64::MAX).min(machine.memory_capacity()),
    };
    for (&t, x) in net.inputs().iter().zip(inputs) {
        let (dtype, shape) = machine.meta(&x);
        if let Some(reason) = mismatch(net, t, dtype, &shape) {
            return Err(boundary(format!("input {reason}")));
        }
        run.values[t.0] = Some(x);
    }
    let no_frees = Vec::new();
    for (i, step) in plan.body.steps.iter().enumerate() {
        run.step(step)?;
        for &t in frees.get(i).unwrap_or(&no_frees) {
            run.values[t] = None;
        }
    }
    net.outputs()
        .iter()
        .map(|t| {
            run.values[t.0].take().ok_or_else(|| BackendError::Execution {
                layer: "(network outputs)".into(),
                reason: format!("output `{}` was not computed", net.tensor(*t).name),
            })
        })
        .collect()
}

/// Why a value of `dtype` and `shape` does not fit tensor `t`'s declaration, if it does not.
fn mismatch(net: &Network, t: TensorId, dtype: DataType, shape: &[usize]) -> Option<String> {
    let desc = net.tensor(t);
    let fits = dtype == desc.dtype
        && shape.len() == desc.shape.rank()
        && desc.shape.dims().iter().zip(shape).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
    (!fits).then(|| format!("`{}` is {dtype}{shape:?}, declared {}{}", desc.name, desc.dtype, desc.shape))
}

/// The state of one execution.
struct Interpreter<'m, M: Machine> {
    machine: &'m M,
    values: Vec<Option<M::Value>>,
    /// The current iteration of each loop being run, innermost last.
    iterations: Vec<(LoopId, usize)>,
    max_trip_count: u64,
    /// Iterations run so far by all loops together, and the most they may run.
    run_trips: u64,
    max_run_trips: u64,
    /// Most bytes one tensor may take.
    memory_budget: u64,
}

impl<'m, M: Machine> Interpreter<'m, M> {
    fn net(&self) -> &'m Network {
        self.machine.network()
    }

    fn step(&mut self, step: &Step) -> Result<(), BackendError> {
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
        BackendError::Execution { layer: self.net().layer(layer).name.clone(), reason }
    }

    fn kernel_fail(&self, layer: LayerId, e: KernelError) -> BackendError {
        let l = self.net().layer(layer);
        e.at_layer(self.machine.backend_name(), &l.name, l.kind.type_name())
    }

    fn layer(&mut self, id: LayerId) -> Result<(), BackendError> {
        let layer = self.net().layer(id);
        let outputs = match layer.kind {
            LayerKind::Iterator { looping, axis, reverse } => vec![self.iterate(id, looping, axis, reverse)?],
            _ => {
                let inputs: Vec<Option<M::Value>> = layer
                    .inputs
                    .iter()
                    .map(|slot| match slot {
                        None => Ok(None),
                        Some(t) => self.values[t.0].clone().map(Some).ok_or_else(|| {
                            self.fail(id, format!("input tensor `{}` has no value", self.net().tensor(*t).name))
                        }),
                    })
                    .collect::<Result<_, _>>()?;
                let outputs =
                    self.machine.run_layer(id, &inputs, self.memory_budget).map_err(|e| self.kernel_fail(id, e))?;
                if outputs.len() != layer.outputs.len() {
                    return Err(self.fail(
                        id,
                        format!("{} outputs produced, the layer has {}", outputs.len(), layer.outputs.len()),
                    ));
                }
                outputs
            }
        };
        for (t, v) in layer.outputs.iter().zip(outputs) {
            self.values[t.0] = Some(v);
        }
        Ok(())
    }

    /// The value in input `slot` of a boundary layer.
    fn input(&self, layer: LayerId, slot: usize) -> Result<M::Value, BackendError> {
        let net = self.net();
        let t = net
            .layer(layer)
            .inputs
            .get(slot)
            .copied()
            .flatten()
            .ok_or_else(|| self.fail(layer, format!("input {slot} is missing")))?;
        self.values[t.0]
            .clone()
            .ok_or_else(|| self.fail(layer, format!("input tensor `{}` has no value", net.tensor(t).name)))
    }

    /// Stores the value of a boundary layer's output after checking it against the plan.
    fn set_output(&mut self, layer: LayerId, value: M::Value) -> Result<(), BackendError> {
        let t = self.net().layer(layer).outputs[0];
        let (dtype, shape) = self.machine.meta(&value);
        if let Some(reason) = mismatch(self.net(), t, dtype, &shape) {
            return Err(self.fail(layer, format!("the value of {reason}")));
        }
        self.values[t.0] = Some(value);
        Ok(())
    }

    fn iterate(&self, id: LayerId, looping: LoopId, axis: usize, reverse: bool) -> Result<M::Value, BackendError> {
        let x = self.input(id, 0)?;
        let Some(&(_, i)) = self.iterations.iter().rev().find(|(l, _)| *l == looping) else {
            return Err(self.fail(id, format!("the iterator runs outside loop #{}", looping.0)));
        };
        let (_, shape) = self.machine.meta(&x);
        let len = *shape.get(axis).ok_or_else(|| self.fail(id, format!("axis {axis} is out of range")))?;
        if i >= len {
            return Err(self.fail(
                id,
                format!("iteration {i} is beyond the {len} slices of the iterated tensor along axis {axis}"),
            ));
        }
        let index = if reverse { len - 1 - i } else { i };
        self.machine.slice_along(&x, axis, index).map_err(|e| self.kernel_fail(id, e))
    }

    fn run_loop(&mut self, r: &LoopRegion) -> Result<(), BackendError> {
        let net = self.machine.network();
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
        let mut stacks: Vec<Vec<M::Value>> = vec![Vec::new(); r.outputs.len()];
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
                    format!(
                        "loop #{} exceeds the maximum trip count of {} set when the engine was built",
                        r.id.0, self.max_trip_count
                    ),
                ));
            }
            if let Some(limit_layer) = limit_layer.filter(|_| self.run_trips >= self.max_run_trips) {
                return Err(self.fail(
                    limit_layer,
                    format!(
                        "the loops of this run exceed {} iterations together ({} times the maximum trip count of one loop, set when the engine was built)",
                        self.max_run_trips,
                        crate::ir::control::RUN_TRIPS_PER_LOOP_TRIPS
                    ),
                ));
            }
            self.run_trips += 1;
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
                    return Err(
                        self.fail(o, format!("the length {} is less than the trip count", lengths[k].unwrap_or(0)))
                    );
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
                    self.stacked(o, &stack, axis, length.unwrap_or(trips), kind)?
                }
            };
            self.set_output(o, value)?;
        }
        Ok(())
    }

    /// The stacked value of a CONCATENATE/REVERSE loop output.
    fn stacked(
        &self,
        o: LayerId,
        stack: &[M::Value],
        axis: usize,
        length: u64,
        kind: LoopOutputKind,
    ) -> Result<M::Value, BackendError> {
        let net = self.net();
        let (dtype, slice_shape) = match stack.first() {
            Some(v) => self.machine.meta(v),
            // No iteration ran: the declared shape, dynamic dims empty.
            None => {
                let value_tensor = net.layer(o).inputs[0].ok_or_else(|| self.fail(o, "input 0 is missing".into()))?;
                let d = net.tensor(value_tensor);
                (d.dtype, d.shape.dims().iter().map(|d| d.fixed().unwrap_or(0)).collect())
            }
        };
        if axis > slice_shape.len() {
            return Err(
                self.fail(o, format!("axis {axis} is out of range for stacking rank-{} values", slice_shape.len()))
            );
        }
        for part in stack {
            let (t, s) = self.machine.meta(part);
            if t != dtype || s != slice_shape {
                return Err(self.fail(
                    o,
                    format!("the stacked value changes between iterations: {dtype}{slice_shape:?} then {t}{s:?}"),
                ));
            }
        }
        let mut stacked_shape = slice_shape.clone();
        stacked_shape.insert(axis, length as usize);
        crate::limits::check_tensor(dtype, &stacked_shape, self.memory_budget)
            .map_err(|reason| self.kernel_fail(o, KernelError::OutOfMemory(reason)))?;
        let reverse = kind == LoopOutputKind::Reverse;
        self.machine
            .stack_along(stack, axis, length as usize, reverse, dtype, &slice_shape)
            .map_err(|e| self.kernel_fail(o, e))
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

    fn host_input(&self, layer: LayerId, slot: usize) -> Result<Arc<HostTensor>, BackendError> {
        let v = self.input(layer, slot)?;
        self.machine.to_host(&v).map_err(|e| self.kernel_fail(layer, e))
    }

    fn int_scalar(&self, layer: LayerId, slot: usize) -> Result<i64, BackendError> {
        let v = self.host_input(layer, slot)?;
        match v.to_i64_vec().as_deref() {
            Some([n]) => Ok(*n),
            _ => Err(self.fail(layer, format!("input {slot} must be one integer, got {}{:?}", v.dtype(), v.shape()))),
        }
    }

    fn bool_scalar(&self, layer: LayerId, slot: usize) -> Result<bool, BackendError> {
        let v = self.host_input(layer, slot)?;
        match v.data() {
            TensorData::Bool(b) if b.len() == 1 => Ok(b[0]),
            _ => Err(self.fail(layer, format!("input {slot} must be one bool, got {}{:?}", v.dtype(), v.shape()))),
        }
    }
}

/// Per top-level step, the tensors no later top-level step reads (network outputs stay).
pub fn top_level_frees(network: &Network, steps: &[Step]) -> Vec<Vec<usize>> {
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
