//! The loop and if-conditional API, modelled on TensorRT's `ILoop` and `IIfConditional`.
//!
//! A loop or conditional is an id; its boundary layers name it. Layers added between the
//! boundary layers need no marking: the builder infers from the data flow which layers run
//! inside which loop or branch (see [`crate::ir::control`]) and checks the rules there.
//!
//! ```
//! # use kiln::*;
//! // for (i = j; i < 10; i += k): the seeds' recurrence, with a WHILE limit.
//! let mut n = Network::new("for");
//! let j = n.add_input("j", DataType::I32, [])?;
//! let k = n.add_input("k", DataType::I32, [])?;
//! let ten = n.add_constant(&[], TensorData::I32(vec![10]))?;
//! let ten = n.output(ten, 0);
//! let looping = n.add_loop();
//! let rec = n.add_recurrence(looping, j)?;
//! let i = n.output(rec, 0);
//! let next = n.add_elementwise(i, k, ElementwiseOp::Sum)?;
//! n.set_recurrence_next(rec, n.output(next, 0))?;
//! let more = n.add_elementwise(i, ten, ElementwiseOp::Less)?;
//! n.add_trip_limit(looping, n.output(more, 0), TripLimitKind::While)?;
//! let last = n.add_loop_output(looping, i, LoopOutputKind::LastValue, 0)?;
//! n.mark_output(n.output(last, 0))?;
//! # Ok::<(), NetworkError>(())
//! ```

use super::layer::{ConditionalId, LayerKind, LoopId, LoopOutputKind, TripLimitKind};
use super::network::{LayerId, Network, TensorId};
use crate::error::NetworkError;

impl Network {
    /// A new loop; add its boundary layers with the `add_trip_limit`, `add_iterator`,
    /// `add_recurrence` and `add_loop_output` methods.
    pub fn add_loop(&mut self) -> LoopId {
        self.control_ids.0 += 1;
        LoopId(self.control_ids.0 - 1)
    }

    /// A new if-conditional; set its condition and add its inputs and outputs.
    pub fn add_if_conditional(&mut self) -> ConditionalId {
        self.control_ids.1 += 1;
        ConditionalId(self.control_ids.1 - 1)
    }

    /// Bounds the loop: COUNT takes a 0-D integer trip count, WHILE a 0-D bool that must be
    /// true for an iteration to run. A loop has at most one limit of each kind.
    pub fn add_trip_limit(&mut self, looping: LoopId, limit: TensorId, kind: TripLimitKind) -> Result<LayerId, NetworkError> {
        self.check_loop(looping, "TripLimit")?;
        let taken = self.layers().iter().find(|l| matches!(l.kind, LayerKind::TripLimit { looping: lp, kind: k } if lp == looping && k == kind));
        if let Some(first) = taken {
            return Err(NetworkError::Layer {
                layer: format!("(TripLimit) [{}]", self.layers().len()),
                tensor: self.tensor(limit).name.clone(),
                rule: format!("loop #{} already has a {kind:?} trip limit (`{}`); a loop has at most one of each kind", looping.0, first.name),
            });
        }
        self.add_layer("", LayerKind::TripLimit { looping, kind }, vec![Some(limit)])
    }

    /// Iterates `input` along `axis` (backwards when `reverse`): one slice per iteration.
    pub fn add_iterator(&mut self, looping: LoopId, input: TensorId, axis: usize, reverse: bool) -> Result<LayerId, NetworkError> {
        self.check_loop(looping, "Iterator")?;
        self.add_layer("", LayerKind::Iterator { looping, axis, reverse }, vec![Some(input)])
    }

    /// A loop-carried value: `initial` (from outside the loop) on the first iteration, then
    /// the next value set by [`Network::set_recurrence_next`].
    pub fn add_recurrence(&mut self, looping: LoopId, initial: TensorId) -> Result<LayerId, NetworkError> {
        self.check_loop(looping, "Recurrence")?;
        self.add_layer("", LayerKind::Recurrence { looping, shape: None }, vec![Some(initial), None])
    }

    /// Sets a recurrence's next value (TensorRT's `setInput(1, next)`): the one back edge.
    pub fn set_recurrence_next(&mut self, recurrence: LayerId, next: TensorId) -> Result<(), NetworkError> {
        let layer = self.boundary_layer(recurrence, "a Recurrence", |k| matches!(k, LayerKind::Recurrence { .. }))?;
        let initial = layer.inputs.first().copied().flatten();
        self.set_layer_inputs(recurrence, vec![initial, Some(next)])
    }

    /// An output of the loop: the last value of a recurrence, or the values of `value` on
    /// every iteration stacked along a new axis `axis` (in reverse for REVERSE). The stacked
    /// length is the trip count unless set with [`Network::set_loop_output_length`].
    pub fn add_loop_output(&mut self, looping: LoopId, value: TensorId, kind: LoopOutputKind, axis: usize) -> Result<LayerId, NetworkError> {
        self.check_loop(looping, "LoopOutput")?;
        self.add_layer("", LayerKind::LoopOutput { looping, kind, axis }, vec![Some(value)])
    }

    /// Sets the length of a CONCATENATE or REVERSE output's new axis (TensorRT's
    /// `setInput(1, length)`): a 0-D integer from outside the loop, at least the trip count
    /// (a shorter one is a run-time error); the elements past the trip count are unspecified.
    pub fn set_loop_output_length(&mut self, output: LayerId, length: TensorId) -> Result<(), NetworkError> {
        let layer = self.boundary_layer(output, "a LoopOutput", |k| matches!(k, LayerKind::LoopOutput { .. }))?;
        let value = layer.inputs.first().copied().flatten();
        self.set_layer_inputs(output, vec![value, Some(length)])
    }

    /// Sets the conditional's predicate, a 0-D bool; a conditional has exactly one.
    pub fn set_condition(&mut self, conditional: ConditionalId, condition: TensorId) -> Result<LayerId, NetworkError> {
        self.check_conditional(conditional, "Condition")?;
        if let Some(first) = self.layers().iter().find(|l| matches!(l.kind, LayerKind::Condition { conditional: c } if c == conditional)) {
            return Err(NetworkError::Layer {
                layer: format!("(Condition) [{}]", self.layers().len()),
                tensor: self.tensor(condition).name.clone(),
                rule: format!("conditional #{} already has a condition (`{}`)", conditional.0, first.name),
            });
        }
        self.add_layer("", LayerKind::Condition { conditional }, vec![Some(condition)])
    }

    /// An input of the conditional's branches: the layers that depend on its output run
    /// only in their branch, when it is taken (lazily); all others run eagerly.
    pub fn add_if_input(&mut self, conditional: ConditionalId, input: TensorId) -> Result<LayerId, NetworkError> {
        self.check_conditional(conditional, "IfConditionalInput")?;
        self.add_layer("", LayerKind::IfConditionalInput { conditional }, vec![Some(input)])
    }

    /// An output of the conditional: `true_value` when the condition holds, else
    /// `false_value`; both with the same type and shape.
    pub fn add_if_output(&mut self, conditional: ConditionalId, true_value: TensorId, false_value: TensorId) -> Result<LayerId, NetworkError> {
        self.check_conditional(conditional, "IfConditionalOutput")?;
        self.add_layer("", LayerKind::IfConditionalOutput { conditional, shape: None }, vec![Some(true_value), Some(false_value)])
    }

    fn check_loop(&self, looping: LoopId, kind: &str) -> Result<(), NetworkError> {
        if looping.0 >= self.control_ids.0 {
            return Err(NetworkError::Layer {
                layer: format!("({kind}) [{}]", self.layers().len()),
                tensor: String::new(),
                rule: format!("loop #{} was not created by add_loop on this network", looping.0),
            });
        }
        Ok(())
    }

    fn check_conditional(&self, conditional: ConditionalId, kind: &str) -> Result<(), NetworkError> {
        if conditional.0 >= self.control_ids.1 {
            return Err(NetworkError::Layer {
                layer: format!("({kind}) [{}]", self.layers().len()),
                tensor: String::new(),
                rule: format!("conditional #{} was not created by add_if_conditional on this network", conditional.0),
            });
        }
        Ok(())
    }

    fn boundary_layer(&self, id: LayerId, what: &str, is: fn(&LayerKind) -> bool) -> Result<&super::network::Layer, NetworkError> {
        match self.layers().get(id.0) {
            Some(l) if is(&l.kind) => Ok(l),
            Some(l) => Err(NetworkError::Layer {
                layer: l.name.clone(),
                tensor: String::new(),
                rule: format!("is a {} layer, not {what} layer", l.kind.type_name()),
            }),
            None => Err(NetworkError::Layer { layer: format!("#{}", id.0), tensor: String::new(), rule: "no such layer".into() }),
        }
    }
}
