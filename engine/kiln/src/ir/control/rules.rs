//! The seeds' rules for loops and conditionals, checked once scopes are known.

use super::scopes::{layer_error, ConstructId, Place, Scopes};
use crate::error::NetworkError;
use crate::ir::layer::{LayerKind, LoopOutputKind, TripLimitKind};
use crate::ir::network::Network;

/// Layers are stored in execution order; the only edge allowed to point backwards is a
/// recurrence's next value (seeds: "the only case where TensorRT allows a back edge").
pub(super) fn check_back_edges(net: &Network) -> Result<(), NetworkError> {
    for (i, l) in net.layers().iter().enumerate() {
        for (slot, t) in l.inputs.iter().enumerate() {
            let Some(t) = *t else { continue };
            let Some((p, _)) = net.tensor(t).producer else { continue };
            let recurrence_next = matches!(l.kind, LayerKind::Recurrence { .. }) && slot == 1;
            if p.0 >= i && !recurrence_next {
                return Err(layer_error(
                    l,
                    net.tensor(t).name.clone(),
                    format!("input {slot} is produced by a later layer; back edges are allowed only into a recurrence's second input"),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn check(scopes: &Scopes) -> Result<(), NetworkError> {
    for c in 0..scopes.constructs.len() {
        match scopes.constructs[c].id {
            ConstructId::Loop(_) => check_loop(scopes, c)?,
            ConstructId::Conditional(_) => check_conditional(scopes, c)?,
        }
    }
    check_visibility(scopes)?;
    let net = scopes.net;
    for &t in net.outputs() {
        let place = scopes.tensor_place(t);
        if let Some(x) = place.construct {
            let layer = net.tensor(t).producer.map(|(l, _)| net.layer(l));
            let what = scopes.constructs[x].id.describe();
            let rule = format!(
                "a network output cannot be produced inside {what}: values leave a loop only through its LoopOutput layers, and the outputs of a conditional nested in a loop or conditional cannot be network outputs"
            );
            return Err(match layer {
                Some(l) => layer_error(l, net.tensor(t).name.clone(), rule),
                None => NetworkError::Layer { layer: String::new(), tensor: net.tensor(t).name.clone(), rule },
            });
        }
    }
    Ok(())
}

fn check_loop(scopes: &Scopes, x: usize) -> Result<(), NetworkError> {
    let layers = scopes.net.layers();
    let what = scopes.constructs[x].id.describe();
    let members = &scopes.constructs[x].members;
    let mut limits = [None, None];
    for &m in members {
        let l = &layers[m];
        match &l.kind {
            LayerKind::TripLimit { kind, .. } => {
                let slot = usize::from(*kind == TripLimitKind::While);
                if let Some(first) = limits[slot].replace(m) {
                    return Err(layer_error(
                        l,
                        String::new(),
                        format!("{what} already has a {kind:?} trip limit (`{}`); a loop has at most one of each kind", layers[first].name),
                    ));
                }
            }
            LayerKind::Recurrence { .. } if l.inputs.get(1).copied().flatten().is_none() => {
                return Err(layer_error(
                    l,
                    String::new(),
                    "the recurrence has no next value: set its input 1 (set_recurrence_next)",
                ));
            }
            LayerKind::LoopOutput { kind: LoopOutputKind::LastValue, .. } => {
                let value = l.inputs.first().copied().flatten();
                let from_recurrence = value.and_then(|t| scopes.net.tensor(t).producer).is_some_and(|(p, _)| {
                    matches!(layers[p.0].kind, LayerKind::Recurrence { looping, .. } if ConstructId::Loop(looping) == scopes.constructs[x].id)
                });
                if !from_recurrence {
                    return Err(layer_error(
                        l,
                        value.map(|t| scopes.net.tensor(t).name.clone()).unwrap_or_default(),
                        format!("the input of a LAST_VALUE loop output must be the output of a recurrence of {what}"),
                    ));
                }
            }
            _ => {}
        }
    }
    if limits.iter().all(Option::is_none) {
        return Err(layer_error(
            &layers[members[0]],
            String::new(),
            format!("{what} has no trip limit: add a COUNT or WHILE trip limit"),
        ));
    }
    Ok(())
}

fn check_conditional(scopes: &Scopes, c: usize) -> Result<(), NetworkError> {
    let layers = scopes.net.layers();
    let what = scopes.constructs[c].id.describe();
    let members = &scopes.constructs[c].members;
    let conditions: Vec<usize> =
        members.iter().copied().filter(|&m| matches!(layers[m].kind, LayerKind::Condition { .. })).collect();
    match conditions.as_slice() {
        [_] => {}
        [] => {
            return Err(layer_error(
                &layers[members[0]],
                String::new(),
                format!("{what} has no condition: set one with set_condition"),
            ))
        }
        [_, second, ..] => {
            return Err(layer_error(&layers[*second], String::new(), format!("{what} has more than one condition")))
        }
    }
    if !members.iter().any(|&m| matches!(layers[m].kind, LayerKind::IfConditionalOutput { .. })) {
        return Err(layer_error(
            &layers[members[0]],
            String::new(),
            format!("{what} has no output; a conditional needs at least one IfConditionalOutput"),
        ));
    }
    Ok(())
}

/// Every input must be defined where the reading layer runs or in an enclosing scope; for
/// boundary layers, the side of the boundary the slot reads from decides.
fn check_visibility(scopes: &Scopes) -> Result<(), NetworkError> {
    let net = scopes.net;
    for (i, l) in net.layers().iter().enumerate() {
        for (slot, t) in l.inputs.iter().enumerate() {
            let Some(t) = *t else { continue };
            let (at, side_rule) = read_place(scopes, i, slot);
            let def = scopes.tensor_place(t);
            if scopes.visible(def, at) {
                continue;
            }
            let rule = match side_rule {
                Some(rule) => rule.to_string(),
                None => leak_rule(scopes, def, at),
            };
            return Err(layer_error(l, net.tensor(t).name.clone(), format!("input {slot}: {rule}")));
        }
    }
    Ok(())
}

/// Where input `slot` of layer `l` is read, and the seeds' rule for that slot when it is a
/// boundary slot that reads from outside its construct.
fn read_place(scopes: &Scopes, l: usize, slot: usize) -> (Place, Option<&'static str>) {
    use LayerKind as K;
    let Some(x) = scopes.member_of[l] else { return (scopes.place[l], None) };
    let outside = scopes.parent[x];
    let inside = Place { construct: Some(x), branch: None };
    match (&scopes.net.layers()[l].kind, slot) {
        (K::Iterator { .. }, _) => (outside, Some("the tensor an iterator iterates over must come from outside its loop")),
        (K::Recurrence { .. }, 0) => (outside, Some("the first input of a recurrence (its initial value) must come from outside its loop")),
        (K::LoopOutput { .. }, 1) => (outside, Some("the length of a loop output must come from outside its loop")),
        (K::Condition { .. }, _) => (outside, Some("the condition must be computed outside its conditional")),
        (K::IfConditionalInput { .. }, _) => (outside, Some("the input of an IfConditionalInput must come from outside its conditional")),
        (K::IfConditionalOutput { .. }, 0) => (Place { construct: Some(x), branch: Some(true) }, None),
        (K::IfConditionalOutput { .. }, _) => (Place { construct: Some(x), branch: Some(false) }, None),
        _ => (inside, None),
    }
}

/// Why a tensor defined at `def` cannot be read at `at`.
fn leak_rule(scopes: &Scopes, def: Place, at: Place) -> String {
    let Some(x) = def.construct else { return "the tensor is not visible here".into() };
    let what = scopes.constructs[x].id.describe();
    let same_conditional_other_branch = at.construct.is_some_and(|a| a == x || scopes.ancestors(a).contains(&x));
    match scopes.constructs[x].id {
        ConstructId::Conditional(_) if same_conditional_other_branch => {
            format!("it is defined in the other branch of {what}; there must be no edges between the two branches")
        }
        ConstructId::Conditional(_) => {
            format!("it is defined inside a branch of {what}; values leave a conditional only through its IfConditionalOutput layers")
        }
        ConstructId::Loop(_) => {
            format!("it is defined inside {what}; values leave a loop only through its LoopOutput layers")
        }
    }
}
