//! Scope inference: which loop or conditional branch every layer belongs to, from data flow.
//!
//! A tensor is *inside* construct X when X's entry layers (Iterator and Recurrence of a
//! loop, IfConditionalInput of a conditional) produce it, or a layer inside X does, except
//! X's own exits (LoopOutput, IfConditionalOutput). A layer is inside X when it reads a
//! tensor inside X, or when it is a boundary layer of a construct Y any of whose boundary
//! layers is inside X: then all of Y is nested in X (seeds: "if loop B uses values defined
//! inside loop A, then B is considered to be nested inside of A"). The branch of a layer
//! inside a conditional is the branch output it feeds.

use crate::error::NetworkError;
use crate::ir::layer::{ConditionalId, LayerKind, LoopId};
use crate::ir::network::{Layer, Network, TensorId};
use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConstructId {
    Loop(LoopId),
    Conditional(ConditionalId),
}

impl ConstructId {
    pub fn describe(self) -> String {
        match self {
            ConstructId::Loop(l) => format!("loop #{}", l.0),
            ConstructId::Conditional(c) => format!("conditional #{}", c.0),
        }
    }
}

pub(super) struct Construct {
    pub id: ConstructId,
    /// Boundary layers, in network order.
    pub members: Vec<usize>,
}

/// Where a layer runs or a tensor is defined: the top level, or inside a construct, in one
/// branch of it (`Some(true)`: then, `Some(false)`: else) or in none in particular.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub construct: Option<usize>,
    pub branch: Option<bool>,
}

pub(super) const ROOT: Place = Place { construct: None, branch: None };

/// What a block of a construct (or of the top level) runs: a layer or a nested construct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Item {
    Layer(usize),
    Construct(usize),
}

pub(super) struct Scopes<'n> {
    pub net: &'n Network,
    pub constructs: Vec<Construct>,
    /// Per layer: the construct it is a boundary layer of.
    pub member_of: Vec<Option<usize>>,
    /// Per construct: where it sits in its parent.
    pub parent: Vec<Place>,
    /// Per layer that is no boundary layer: where it runs.
    pub place: Vec<Place>,
    /// Per construct: every layer inside it, nested constructs and its own boundary included.
    pub subtree: Vec<Vec<usize>>,
}

/// The construct a boundary layer belongs to.
pub(super) fn boundary_of(kind: &LayerKind) -> Option<ConstructId> {
    use LayerKind as K;
    match kind {
        K::TripLimit { looping, .. }
        | K::Iterator { looping, .. }
        | K::Recurrence { looping, .. }
        | K::LoopOutput { looping, .. } => Some(ConstructId::Loop(*looping)),
        K::Condition { conditional } | K::IfConditionalInput { conditional } | K::IfConditionalOutput { conditional, .. } => {
            Some(ConstructId::Conditional(*conditional))
        }
        _ => None,
    }
}

/// Boundary layers whose output is outside their construct.
pub(super) fn is_exit(kind: &LayerKind) -> bool {
    matches!(kind, LayerKind::LoopOutput { .. } | LayerKind::IfConditionalOutput { .. })
}

pub(super) fn layer_error(layer: &Layer, tensor: String, rule: impl Into<String>) -> NetworkError {
    NetworkError::Layer { layer: layer.name.clone(), tensor, rule: rule.into() }
}

impl<'n> Scopes<'n> {
    pub fn infer(net: &'n Network) -> Result<Scopes<'n>, NetworkError> {
        let layers = net.layers();
        let mut constructs: Vec<Construct> = Vec::new();
        let mut index: HashMap<(bool, usize), usize> = HashMap::new();
        let mut member_of = vec![None; layers.len()];
        for (i, l) in layers.iter().enumerate() {
            let Some(id) = boundary_of(&l.kind) else { continue };
            let key = match id {
                ConstructId::Loop(x) => (true, x.0),
                ConstructId::Conditional(c) => (false, c.0),
            };
            let c = *index.entry(key).or_insert_with(|| {
                constructs.push(Construct { id, members: Vec::new() });
                constructs.len() - 1
            });
            constructs[c].members.push(i);
            member_of[i] = Some(c);
        }
        let mut scopes = Scopes {
            net,
            parent: vec![ROOT; constructs.len()],
            constructs,
            member_of,
            place: vec![ROOT; layers.len()],
            subtree: Vec::new(),
        };
        let inside: Vec<Vec<bool>> = (0..scopes.constructs.len()).map(|x| scopes.inside(x)).collect();
        scopes.nest(&inside)?;
        scopes.place_layers(&inside)?;
        scopes.subtree = scopes.subtrees();
        for c in 0..scopes.constructs.len() {
            if matches!(scopes.constructs[c].id, ConstructId::Conditional(_)) {
                scopes.assign_branches(c)?;
            }
        }
        Ok(scopes)
    }

    fn producer(&self, t: TensorId) -> Option<usize> {
        self.net.tensor(t).producer.map(|(l, _)| l.0)
    }

    /// Per layer, whether it is inside construct `x` (its boundary layers are).
    fn inside(&self, x: usize) -> Vec<bool> {
        let layers = self.net.layers();
        let mut inside = vec![false; layers.len()];
        for &m in &self.constructs[x].members {
            inside[m] = true;
        }
        let tensor_inside = |inside: &[bool], t: TensorId| {
            self.producer(t).is_some_and(|p| inside[p] && !(self.member_of[p] == Some(x) && is_exit(&layers[p].kind)))
        };
        // A fixpoint: recurrence back edges and nested constructs reach earlier layers.
        let mut changed = true;
        while changed {
            changed = false;
            for (i, l) in layers.iter().enumerate() {
                if inside[i] || !l.inputs.iter().flatten().any(|&t| tensor_inside(&inside, t)) {
                    continue;
                }
                changed = true;
                match self.member_of[i] {
                    Some(y) => self.constructs[y].members.iter().for_each(|&m| inside[m] = true),
                    None => inside[i] = true,
                }
            }
        }
        inside
    }

    /// Sets each construct's parent; rejects constructs that are not cleanly nested.
    fn nest(&mut self, inside: &[Vec<bool>]) -> Result<(), NetworkError> {
        let n = self.constructs.len();
        let first = |x: usize| self.constructs[x].members[0];
        let within = |x: usize, y: usize| x != y && inside[y][first(x)];
        for x in 0..n {
            let ancestors: Vec<usize> = (0..n).filter(|&y| within(x, y)).collect();
            for &y in &ancestors {
                if within(y, x) {
                    return Err(self.not_nested(x, y, "each uses values defined inside the other"));
                }
                for &z in &ancestors {
                    if y != z && !within(y, z) && !within(z, y) {
                        return Err(self.not_nested(y, z, &format!(
                            "{} uses values defined inside both, and neither is nested in the other",
                            self.constructs[x].id.describe()
                        )));
                    }
                }
            }
            // The innermost ancestor is the one inside all the others.
            let innermost = ancestors.iter().copied().find(|&y| ancestors.iter().all(|&z| z == y || within(y, z)));
            self.parent[x] = Place { construct: innermost, branch: None };
        }
        Ok(())
    }

    fn not_nested(&self, x: usize, y: usize, why: &str) -> NetworkError {
        let layer = &self.net.layers()[self.constructs[x].members[0]];
        layer_error(
            layer,
            String::new(),
            format!(
                "{} and {} are not cleanly nested: {why}",
                self.constructs[x].id.describe(),
                self.constructs[y].id.describe()
            ),
        )
    }

    /// The innermost construct containing each non-boundary layer.
    fn place_layers(&mut self, inside: &[Vec<bool>]) -> Result<(), NetworkError> {
        let n = self.constructs.len();
        let ancestors: Vec<Vec<usize>> = (0..n).map(|x| self.ancestors(x)).collect();
        let within = |x: usize, y: usize| ancestors[x].contains(&y);
        for (i, layer) in self.net.layers().iter().enumerate() {
            if self.member_of[i].is_some() {
                continue;
            }
            let containing: Vec<usize> = (0..n).filter(|&x| inside[x][i]).collect();
            let innermost = containing.iter().copied().find(|&x| containing.iter().all(|&y| y == x || within(x, y)));
            match innermost {
                Some(x) => self.place[i] = Place { construct: Some(x), branch: None },
                None if containing.is_empty() => {}
                None => {
                    let (a, b) = (containing[0], containing[1]);
                    return Err(layer_error(
                        layer,
                        String::new(),
                        format!(
                            "reads values defined inside {} and inside {}, which are not nested in one another",
                            self.constructs[a].id.describe(),
                            self.constructs[b].id.describe()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The constructs enclosing `x`, innermost first.
    pub fn ancestors(&self, x: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = self.parent[x].construct;
        while let Some(c) = cur {
            if out.contains(&c) {
                break; // unreachable after `nest`, but never loop forever
            }
            out.push(c);
            cur = self.parent[c].construct;
        }
        out
    }

    /// The construct a layer belongs to directly (its own for boundary layers).
    pub fn home(&self, l: usize) -> Option<usize> {
        self.member_of[l].or(self.place[l].construct)
    }

    fn subtrees(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.constructs.len()];
        for l in 0..self.net.layers().len() {
            if let Some(h) = self.home(l) {
                out[h].push(l);
                for a in self.ancestors(h) {
                    out[a].push(l);
                }
            }
        }
        out
    }

    /// Whether layer `l` lies inside construct `x` (at any depth, boundary included).
    pub fn is_within(&self, l: usize, x: usize) -> bool {
        self.home(l).is_some_and(|h| h == x || self.ancestors(h).contains(&x))
    }

    /// The item of scope `s` that contains layer `l`: the layer itself when it runs directly
    /// in `s` (an Iterator of `s` included), or the nested construct holding it. `None` when
    /// `l` lies outside `s` or is one of `s`'s other boundary layers.
    pub fn item_in(&self, s: Option<usize>, l: usize) -> Option<Item> {
        let mut cur = match self.member_of[l] {
            Some(y) if Some(y) == s => {
                return matches!(self.net.layers()[l].kind, LayerKind::Iterator { .. }).then_some(Item::Layer(l));
            }
            Some(y) => y,
            None if self.place[l].construct == s => return Some(Item::Layer(l)),
            None => self.place[l].construct?,
        };
        for _ in 0..=self.constructs.len() {
            let up = self.parent[cur].construct;
            if up == s {
                return Some(Item::Construct(cur));
            }
            cur = up?;
        }
        None
    }

    /// The tensors an item reads from outside itself (an exit of a nested construct read by
    /// that same construct counts: it is a cycle the block ordering reports).
    pub fn external_reads(&self, item: Item) -> Vec<TensorId> {
        let layers = self.net.layers();
        match item {
            Item::Layer(l) => layers[l].inputs.iter().flatten().copied().collect(),
            Item::Construct(y) => {
                let mut out = Vec::new();
                let mut seen = HashSet::new();
                for &l in &self.subtree[y] {
                    for &t in layers[l].inputs.iter().flatten() {
                        let external = self.producer(t).is_none_or(|p| {
                            !self.is_within(p, y) || (self.member_of[p] == Some(y) && is_exit(&layers[p].kind))
                        });
                        if external && seen.insert(t) {
                            out.push(t);
                        }
                    }
                }
                out
            }
        }
    }

    /// The items that run directly in construct `c` (or at the top level for `None`).
    pub fn items(&self, s: Option<usize>) -> Vec<Item> {
        let mut seen: HashSet<Item> = HashSet::new();
        (0..self.net.layers().len()).filter_map(|l| self.item_in(s, l)).filter(|&item| seen.insert(item)).collect()
    }

    pub fn item_branch(&self, item: Item) -> Option<bool> {
        match item {
            Item::Layer(l) => self.place[l].branch,
            Item::Construct(y) => self.parent[y].branch,
        }
    }

    fn set_item_branch(&mut self, item: Item, branch: bool) {
        match item {
            Item::Layer(l) => self.place[l].branch = Some(branch),
            Item::Construct(y) => self.parent[y].branch = Some(branch),
        }
    }

    fn item_name(&self, item: Item) -> String {
        match item {
            Item::Layer(l) => format!("layer `{}`", self.net.layers()[l].name),
            Item::Construct(y) => self.constructs[y].id.describe(),
        }
    }

    /// Puts each item of conditional `c` in the branch whose output it feeds.
    fn assign_branches(&mut self, c: usize) -> Result<(), NetworkError> {
        let layers = self.net.layers();
        let outputs: Vec<usize> = self.constructs[c]
            .members
            .iter()
            .copied()
            .filter(|&m| matches!(layers[m].kind, LayerKind::IfConditionalOutput { .. }))
            .collect();
        for (slot, branch) in [(0, true), (1, false)] {
            let mut stack: Vec<TensorId> =
                outputs.iter().filter_map(|&o| layers[o].inputs.get(slot).copied().flatten()).collect();
            while let Some(t) = stack.pop() {
                let Some(item) = self.producer(t).and_then(|p| self.item_in(Some(c), p)) else { continue };
                match self.item_branch(item) {
                    Some(b) if b == branch => continue,
                    Some(_) => {
                        let which = |b: bool| if b { "true" } else { "false" };
                        return Err(NetworkError::Layer {
                            layer: layers[outputs[0]].name.clone(),
                            tensor: self.net.tensor(t).name.clone(),
                            rule: format!(
                                "{} feeds both branches of {}: there must be no edges between the {} and the {} branch",
                                self.item_name(item),
                                self.constructs[c].id.describe(),
                                which(!branch),
                                which(branch)
                            ),
                        });
                    }
                    None => {
                        self.set_item_branch(item, branch);
                        stack.extend(self.external_reads(item));
                    }
                }
            }
        }
        if let Some(stray) = self.items(Some(c)).into_iter().find(|&i| self.item_branch(i).is_none()) {
            let layer = match stray {
                Item::Layer(l) => l,
                Item::Construct(y) => self.constructs[y].members[0],
            };
            return Err(layer_error(
                &layers[layer],
                String::new(),
                format!(
                    "{} reads an input of {} but feeds neither branch's output, so no branch holds it",
                    self.item_name(stray),
                    self.constructs[c].id.describe()
                ),
            ));
        }
        Ok(())
    }

    /// Where a tensor is defined.
    pub fn tensor_place(&self, t: TensorId) -> Place {
        let Some(p) = self.producer(t) else { return ROOT };
        match self.member_of[p] {
            Some(x) if is_exit(&self.net.layers()[p].kind) => self.parent[x],
            Some(x) => Place { construct: Some(x), branch: None },
            None => self.place[p],
        }
    }

    /// Whether a tensor defined at `def` can be read at `at`: `def` encloses `at`.
    pub fn visible(&self, def: Place, at: Place) -> bool {
        let mut cur = Some(at);
        // Bounded by the nesting depth; the bound also guards a malformed parent chain.
        for _ in 0..=self.constructs.len() {
            let Some(p) = cur else { break };
            if p.construct == def.construct && (def.branch.is_none() || def.branch == p.branch) {
                return true;
            }
            cur = p.construct.map(|c| self.parent[c]);
        }
        false
    }
}
