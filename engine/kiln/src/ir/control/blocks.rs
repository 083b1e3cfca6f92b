//! Lowering scopes to blocks: each construct's items, ordered by their dependencies.

use super::scopes::{layer_error, ConstructId, Item, Scopes};
use super::{Block, ConditionalRegion, LoopRegion, Step};
use crate::error::NetworkError;
use crate::ir::layer::{LayerKind, LoopId, TripLimitKind};
use crate::ir::network::LayerId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

pub(super) fn build(scopes: &Scopes) -> Result<Block, NetworkError> {
    let items = scopes.items(None);
    order(scopes, None, &items, &HashSet::new())
}

/// The items of scope `s`, in an order where each follows the items it reads from; items in
/// `done` (already run, e.g. a loop's condition block) count as available. Ties keep the
/// network's order.
fn order(scopes: &Scopes, s: Option<usize>, items: &[Item], done: &HashSet<Item>) -> Result<Block, NetworkError> {
    let position: HashMap<Item, usize> = items.iter().enumerate().map(|(i, &it)| (it, i)).collect();
    let mut waiting = vec![0usize; items.len()];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
    for (i, &item) in items.iter().enumerate() {
        let mut sources = HashSet::new();
        for t in scopes.external_reads(item) {
            let Some((p, _)) = scopes.net.tensor(t).producer else { continue };
            let Some(source) = scopes.item_in(s, p.0) else { continue };
            if done.contains(&source) {
                continue;
            }
            if source == item {
                return Err(cycle_error(scopes, item, "reads its own output"));
            }
            if let Some(&j) = position.get(&source) {
                if sources.insert(j) {
                    waiting[i] += 1;
                    readers[j].push(i);
                }
            }
        }
    }
    let first_layer = |item: Item| match item {
        Item::Layer(l) => l,
        Item::Construct(y) => scopes.subtree[y].iter().copied().min().unwrap_or(usize::MAX),
    };
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> =
        (0..items.len()).filter(|&i| waiting[i] == 0).map(|i| Reverse((first_layer(items[i]), i))).collect();
    let mut steps = Vec::with_capacity(items.len());
    while let Some(Reverse((_, i))) = ready.pop() {
        steps.push(step(scopes, items[i])?);
        for &r in &readers[i] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                ready.push(Reverse((first_layer(items[r]), r)));
            }
        }
    }
    if let Some(stuck) = (0..items.len()).find(|&i| waiting[i] > 0) {
        return Err(cycle_error(scopes, items[stuck], "depends on its own result"));
    }
    Ok(Block { steps })
}

fn cycle_error(scopes: &Scopes, item: Item, what: &str) -> NetworkError {
    let layers = scopes.net.layers();
    let (layer, subject) = match item {
        Item::Layer(l) => (l, "the layer".to_string()),
        Item::Construct(y) => (scopes.constructs[y].members[0], scopes.constructs[y].id.describe()),
    };
    layer_error(
        &layers[layer],
        String::new(),
        format!("{subject} {what} through a loop or conditional boundary: the network is not cleanly nested"),
    )
}

fn step(scopes: &Scopes, item: Item) -> Result<Step, NetworkError> {
    let y = match item {
        Item::Layer(l) => return Ok(Step::Layer(LayerId(l))),
        Item::Construct(y) => y,
    };
    let layers = scopes.net.layers();
    let members = &scopes.constructs[y].members;
    let of_kind = |pred: fn(&LayerKind) -> bool| -> Vec<LayerId> {
        members.iter().copied().filter(|&m| pred(&layers[m].kind)).map(LayerId).collect()
    };
    match scopes.constructs[y].id {
        ConstructId::Loop(id) => loop_region(scopes, y, id),
        ConstructId::Conditional(id) => {
            let items = scopes.items(Some(y));
            let branch = |b: bool| -> Vec<Item> {
                items.iter().copied().filter(|&i| scopes.item_branch(i) == Some(b)).collect()
            };
            let condition = of_kind(|k| matches!(k, LayerKind::Condition { .. }));
            Ok(Step::Conditional(Box::new(ConditionalRegion {
                id,
                condition: condition[0],
                inputs: of_kind(|k| matches!(k, LayerKind::IfConditionalInput { .. })),
                then_branch: order(scopes, Some(y), &branch(true), &HashSet::new())?,
                else_branch: order(scopes, Some(y), &branch(false), &HashSet::new())?,
                outputs: of_kind(|k| matches!(k, LayerKind::IfConditionalOutput { .. })),
            })))
        }
    }
}

fn loop_region(scopes: &Scopes, y: usize, id: LoopId) -> Result<Step, NetworkError> {
    let layers = scopes.net.layers();
    let members = &scopes.constructs[y].members;
    let limit = |kind: TripLimitKind| {
        members.iter().copied().find(|&m| matches!(layers[m].kind, LayerKind::TripLimit { kind: k, .. } if k == kind))
    };
    let (count_limit, while_limit) = (limit(TripLimitKind::Count), limit(TripLimitKind::While));
    let items = scopes.items(Some(y));
    // The WHILE limit's value is needed before anything else of an iteration runs.
    let mut condition_items: HashSet<Item> = HashSet::new();
    let mut stack: Vec<_> = while_limit.iter().flat_map(|&w| layers[w].inputs.iter().flatten().copied()).collect();
    while let Some(t) = stack.pop() {
        let Some((p, _)) = scopes.net.tensor(t).producer else { continue };
        if let Some(item) = scopes.item_in(Some(y), p.0) {
            if condition_items.insert(item) {
                stack.extend(scopes.external_reads(item));
            }
        }
    }
    let (cond, rest): (Vec<Item>, Vec<Item>) = items.iter().partition(|i| condition_items.contains(i));
    let of_kind = |pred: fn(&LayerKind) -> bool| -> Vec<LayerId> {
        members.iter().copied().filter(|&m| pred(&layers[m].kind)).map(LayerId).collect()
    };
    Ok(Step::Loop(Box::new(LoopRegion {
        id,
        count_limit: count_limit.map(LayerId),
        while_limit: while_limit.map(LayerId),
        recurrences: of_kind(|k| matches!(k, LayerKind::Recurrence { .. })),
        outputs: of_kind(|k| matches!(k, LayerKind::LoopOutput { .. })),
        condition: order(scopes, Some(y), &cond, &HashSet::new())?,
        body: order(scopes, Some(y), &rest, &condition_items)?,
    })))
}
