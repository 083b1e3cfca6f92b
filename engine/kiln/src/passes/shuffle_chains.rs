//! Shuffle chains composed (the numbers are checked on the cpu backend: kiln-cpu's pass tests):
//! consecutive Shuffles, each the only reader of the one before, become one Shuffle (and a
//! reshape after it where the output needs one). The composed layer splits its input's dims
//! into the finest factors any step of the chain splits them into, transposes those factors
//! once, and merges only at the end. A dynamic dim is one factor no step may split; reshapes
//! name it by a `0` placeholder or the `-1`, as the exporters' do.
//!
//! A step that merges dims which an earlier transpose moved apart cannot be a view: a backend
//! that keeps views (cuda) copies there. The dynamo exporter writes a transformer's key
//! transpose as reshape → transpose → reshape (batch and heads merged) → transpose → reshape
//! (split back), so every layer copied K; composed, it is the legacy exporter's reshape and
//! transpose, a strided view of the projection's output.
//!
//! The same factors move a constant that broadcasts onto a Shuffle's input through it
//! ([`broadcast_through`]): Q/DQ propagation moves a bias below the split of a packed
//! in-projection that way.

use super::graph::{consumers, has_control_flow, known_value};
use super::{Pass, PassContext, PassError};
use crate::ir::layer::{LayerKind, ShuffleParams};
use crate::ir::network::{Network, TensorId};
use crate::ir::shape::Dim;
use crate::ir::rewrite::Rewriter;
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Clone, Copy, Debug, Default)]
pub struct ShuffleChainComposition;

impl Pass for ShuffleChainComposition {
    fn name(&self) -> &'static str {
        "shuffle-chain-composition"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let chains = composable_chains(network);
        if chains.is_empty() {
            return Ok(None);
        }
        let skipped: HashSet<usize> = chains.values().flat_map(|c| c.layers[..c.layers.len() - 1].iter().copied()).collect();
        let mut rb = Rewriter::new(network);
        for (i, l) in network.layers().iter().enumerate() {
            if skipped.contains(&i) {
                continue;
            }
            let Some(chain) = chains.get(&i) else {
                rb.keep(i)?;
                continue;
            };
            let source = rb.get(chain.source)?;
            let out = l.outputs[0];
            // The composed layer is named after every step it replaces, as fused layers are.
            let name = chain.layers.iter().map(|&k| network.layers()[k].name.as_str()).collect::<Vec<_>>().join(" + ");
            match &chain.reshape_after {
                None => {
                    rb.add(&name, LayerKind::Shuffle(chain.composed.clone()), vec![Some(source)], &[out])?;
                }
                Some(dims) => {
                    let factors_name = format!("{name} (factors)");
                    let factors = rb.add_layer(&factors_name, LayerKind::Shuffle(chain.composed.clone()), vec![Some(source)], std::slice::from_ref(&factors_name))?;
                    rb.add(&format!("{name} (merged)"), LayerKind::Shuffle(reshape(dims.clone())), vec![Some(factors[0])], &[out])?;
                }
            }
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

/// A chain's layers (first to last), the tensor its first layer reads, and what replaces it.
struct Chain {
    layers: Vec<usize>,
    source: TensorId,
    composed: ShuffleParams,
    reshape_after: Option<Vec<i64>>,
}

/// A Shuffle that only reshapes, to `dims` (`0` copies the input's dim, `-1` takes the rest).
pub(super) fn reshape(dims: Vec<i64>) -> ShuffleParams {
    ShuffleParams { first_transpose: vec![], reshape: Some(dims), second_transpose: vec![], zero_is_placeholder: true }
}

/// Every chain of two or more Shuffles that composes into fewer layers, keyed by its last layer.
fn composable_chains(net: &Network) -> HashMap<usize, Chain> {
    let readers = consumers(net);
    let plain = |i: usize| plain_shuffle(net, i);
    // The Shuffle producing `t` and its input, when `t` has no other reader and is not an output.
    let chained_producer = |t: TensorId| {
        if readers[t.0].len() != 1 || net.outputs().contains(&t) {
            return None;
        }
        let (producer, _) = net.tensor(t).producer?;
        plain(producer.0).map(|(_, input, _)| (producer.0, input))
    };
    let mut chains = HashMap::new();
    for i in 0..net.layers().len() {
        let Some((_, input, _)) = plain(i) else { continue };
        // Only a chain's last layer starts the walk back.
        let out = net.layers()[i].outputs[0];
        let extends = !net.outputs().contains(&out) && matches!(readers[out.0][..], [(reader, 0)] if plain(reader).is_some());
        if extends {
            continue;
        }
        let mut layers = vec![i];
        let mut source = input;
        while let Some((p, input)) = chained_producer(source) {
            layers.push(p);
            source = input;
        }
        layers.reverse();
        if layers.len() < 2 {
            continue;
        }
        let source_dims = net.tensor(source).shape.dims();
        // An empty tensor has nothing to move (and its zero-length dims no factors).
        if source_dims.contains(&Dim::Fixed(0)) {
            continue;
        }
        let mut factors = Factors::new(source_dims);
        let steps_fit = layers.iter().all(|&k| {
            let (p, _, dims) = plain(k).expect("a plain Shuffle");
            factors.shuffle(p, dims.as_deref(), net.tensor(net.layers()[k].outputs[0]).shape.dims())
        });
        let Some((composed, reshape_after)) = steps_fit.then(|| factors.composed(net.tensor(out).shape.dims())).flatten() else {
            continue;
        };
        if 1 + reshape_after.is_some() as usize >= layers.len() {
            continue;
        }
        chains.insert(i, Chain { layers, source, composed, reshape_after });
    }
    chains
}

/// A Shuffle with one output and its reshape dims known at build time: its parameters, input
/// and dims.
fn plain_shuffle(net: &Network, i: usize) -> Option<(&ShuffleParams, TensorId, Option<Vec<i64>>)> {
    let l = &net.layers()[i];
    let LayerKind::Shuffle(p) = &l.kind else { return None };
    let dims = match l.inputs.get(1).copied().flatten() {
        Some(t) => Some(known_value(net, t)?.to_i64_vec()?),
        None => p.reshape.clone(),
    };
    let input = (*l.inputs.first()?)?;
    (l.outputs.len() == 1).then_some((p, input, dims))
}

/// A constant that broadcasts onto Shuffle `layer`'s input, moved through the Shuffle: `dims`
/// are its dims padded on the left to the input's rank, each 1 or the input's. Returns its dims
/// on the output's side (each 1 or the output's) and, for each of its elements there in
/// row-major order, the row-major index of the constant's element it holds. `None` where an
/// output dim merges dims the constant broadcasts along with dims it does not.
pub(super) fn broadcast_through(net: &Network, layer: usize, dims: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let (p, input, reshape) = plain_shuffle(net, layer)?;
    let source = net.tensor(input).shape.dims();
    if source.len() != dims.len() || source.contains(&Dim::Fixed(0)) {
        return None;
    }
    // A dim the constant varies along is a fixed dim of the input of that length.
    let full: Vec<bool> = dims.iter().map(|&c| c != 1).collect();
    if dims.iter().zip(source).any(|(&c, d)| c != 1 && d.fixed() != Some(c)) {
        return None;
    }
    let mut factors = Factors::new(source);
    if !factors.shuffle(p, reshape.as_deref(), net.tensor(net.layers()[layer].outputs[0]).shape.dims()) {
        return None;
    }
    let owner: HashMap<usize, usize> = factors.input.iter().enumerate().flat_map(|(d, fs)| fs.iter().map(move |&f| (f, d))).collect();
    let size = |f: usize| match factors.sizes[f] {
        Extent::Fixed(n) => n,
        Extent::Dynamic(_) => 1,
    };
    let mut out_dims = Vec::with_capacity(factors.groups.len());
    for group in &factors.groups {
        let varying = group.iter().filter(|f| full[owner[f]]).count();
        match varying {
            0 => out_dims.push(1),
            n if n == group.len() => out_dims.push(group.iter().map(|&f| size(f)).product()),
            _ => return None,
        }
    }
    // Each factor's index into the constant: its stride within its source dim, times that dim's.
    let dim_stride = crate::ir::format::row_major_strides(dims);
    let mut factor_stride = HashMap::new();
    for (d, fs) in factors.input.iter().enumerate() {
        let mut inner = 1;
        for &f in fs.iter().rev() {
            factor_stride.insert(f, if full[d] { inner * dim_stride[d] } else { 0 });
            inner *= size(f);
        }
    }
    // The output's varying factors, outermost first, and the constant's elements they walk.
    let walked: Vec<usize> = factors.groups.iter().filter(|g| g.iter().all(|f| full[owner[f]])).flatten().copied().collect();
    let count: usize = out_dims.iter().product();
    let indices = (0..count)
        .map(|mut at| {
            let mut index = 0;
            for &f in walked.iter().rev() {
                index += (at % size(f)) * factor_stride[&f];
                at /= size(f);
            }
            index
        })
        .collect();
    Some((out_dims, indices))
}

/// A factor's extent: fixed, or one dynamic dim of the source (named, or unknown), which no
/// step may split.
#[derive(Clone, Debug, PartialEq)]
enum Extent {
    Fixed(usize),
    Dynamic(Dim),
}

/// What a reshape makes one dim of.
enum Target {
    Fixed(usize),
    /// The named dynamic dim itself.
    Named(String),
    /// The current dim at the same place (a `0` placeholder).
    Copy(usize),
    /// What the other dims leave (the `-1`).
    Rest,
}

/// A tensor's dims as groups of factors of its source's dims: `sizes[f]` is factor f's
/// extent, `input[d]` the factors source dim d splits into (outermost first), `groups[d]` the
/// factors the current dim d merges (outermost first). Size-1 dims have no factors.
struct Factors {
    sizes: Vec<Extent>,
    input: Vec<Vec<usize>>,
    groups: Vec<Vec<usize>>,
}

impl Factors {
    fn new(shape: &[Dim]) -> Factors {
        let mut f = Factors { sizes: vec![], input: vec![], groups: vec![] };
        for d in shape {
            let ids = match d {
                Dim::Fixed(n) if *n <= 1 => vec![],
                Dim::Fixed(n) => {
                    f.sizes.push(Extent::Fixed(*n));
                    vec![f.sizes.len() - 1]
                }
                d => {
                    f.sizes.push(Extent::Dynamic(d.clone()));
                    vec![f.sizes.len() - 1]
                }
            };
            f.input.push(ids.clone());
            f.groups.push(ids);
        }
        f
    }

    /// Applies one Shuffle with reshape dims `dims` (its parameter or its dims input), ending
    /// at `out` (inferred); false where a step splits a factor other than into whole parts, or
    /// a dynamic one at all (no composition then).
    fn shuffle(&mut self, p: &ShuffleParams, dims: Option<&[i64]>, out: &[Dim]) -> bool {
        if !p.first_transpose.is_empty() && !self.permute(&p.first_transpose) {
            return false;
        }
        if let Some(dims) = dims {
            // The shape between the reshape and the second transpose: out[i] = mid[perm[i]].
            let mut mid = out.to_vec();
            if !p.second_transpose.is_empty() {
                if p.second_transpose.len() != out.len() || dims.len() != out.len() {
                    return false;
                }
                for (i, &q) in p.second_transpose.iter().enumerate() {
                    mid[q] = out[i].clone();
                }
            }
            if dims.len() != mid.len() {
                return false;
            }
            let targets: Option<Vec<Target>> = mid
                .iter()
                .zip(dims)
                .enumerate()
                .map(|(i, (d, &raw))| match d {
                    Dim::Fixed(n) => Some(Target::Fixed(*n)),
                    Dim::Named(s) => Some(Target::Named(s.clone())),
                    Dim::Unknown if raw == -1 => Some(Target::Rest),
                    Dim::Unknown if raw == 0 && p.zero_is_placeholder => Some(Target::Copy(i)),
                    Dim::Unknown => None,
                })
                .collect();
            if !targets.is_some_and(|t| self.regroup(&t)) {
                return false;
            }
        }
        if !p.second_transpose.is_empty() && !self.permute(&p.second_transpose) {
            return false;
        }
        self.groups.len() == out.len() && self.groups.iter().zip(out).all(|(g, d)| self.is_dim(g, d))
    }

    fn permute(&mut self, perm: &[usize]) -> bool {
        if perm.len() != self.groups.len() || perm.iter().any(|&q| q >= perm.len()) {
            return false;
        }
        self.groups = perm.iter().map(|&q| self.groups[q].clone()).collect();
        true
    }

    /// Whether factors `group` make dim `d`: the same fixed length, or the one dynamic factor
    /// of that name (an unknown dim: any).
    fn is_dim(&self, group: &[usize], d: &Dim) -> bool {
        match d {
            Dim::Fixed(n) => self.fixed_product(group) == Some(*n),
            Dim::Named(_) => matches!(group, [f] if self.sizes[*f] == Extent::Dynamic(d.clone())),
            Dim::Unknown => true,
        }
    }

    fn fixed_product(&self, group: &[usize]) -> Option<usize> {
        group.iter().map(|&f| match self.sizes[f] {
            Extent::Fixed(n) => Some(n),
            Extent::Dynamic(_) => None,
        }).product()
    }

    /// The current factors, in row-major order, grouped into `targets`: from the left up to the
    /// `-1`, then from the right back to it, the `-1` taking what is between. A fixed dim takes
    /// whole factors while they divide what it still needs, and splits the next one where what
    /// it needs divides it (a factor split from the left gives its outer part, from the right
    /// its inner part).
    fn regroup(&mut self, targets: &[Target]) -> bool {
        let mut queue: VecDeque<usize> = self.groups.concat().into();
        let rest = targets.iter().position(|t| matches!(t, Target::Rest));
        let (left, right) = targets.split_at(rest.unwrap_or(targets.len()));
        let mut groups = Vec::with_capacity(targets.len());
        let mut taken = 0;
        for target in left {
            let Some(group) = self.take(&mut queue, target, taken, true) else { return false };
            taken += group.len();
            groups.push(group);
        }
        let mut tail = Vec::new();
        for target in right.iter().skip(1).rev() {
            let Some(group) = self.take(&mut queue, target, usize::MAX, false) else { return false };
            tail.push(group);
        }
        if rest.is_some() {
            groups.push(queue.drain(..).collect());
        }
        groups.extend(tail.into_iter().rev());
        self.groups = groups;
        queue.is_empty()
    }

    /// One dim's factors off the front (or the back) of `queue`; `taken`: how many factors the
    /// dims before it took (a `0` placeholder copies the current dim only where they took whole
    /// current dims).
    fn take(&mut self, queue: &mut VecDeque<usize>, target: &Target, taken: usize, front: bool) -> Option<Vec<usize>> {
        let pop = |q: &mut VecDeque<usize>| if front { q.pop_front() } else { q.pop_back() };
        match target {
            Target::Rest => None,
            Target::Named(name) => {
                let f = pop(queue)?;
                (self.sizes[f] == Extent::Dynamic(Dim::Named(name.clone()))).then(|| vec![f])
            }
            Target::Copy(i) => {
                let before: usize = self.groups.get(..*i)?.iter().map(Vec::len).sum();
                if !front || before != taken {
                    return None;
                }
                let group = self.groups.get(*i)?.clone();
                (queue.len() >= group.len() && queue.iter().take(group.len()).eq(group.iter())).then(|| {
                    queue.drain(..group.len());
                    group
                })
            }
            Target::Fixed(d) => {
                let (mut group, mut need) = (VecDeque::new(), *d);
                while need > 1 {
                    let f = pop(queue)?;
                    let Extent::Fixed(size) = self.sizes[f] else { return None };
                    let mine = if need.is_multiple_of(size) {
                        need /= size;
                        f
                    } else if size.is_multiple_of(need) {
                        // The part this dim needs; the rest goes back for the next dim.
                        let (outer, inner) = self.split(f, if front { need } else { size / need });
                        let (mine, back) = if front { (outer, inner) } else { (inner, outer) };
                        if front { queue.push_front(back) } else { queue.push_back(back) }
                        need = 1;
                        mine
                    } else {
                        return None;
                    };
                    if front { group.push_back(mine) } else { group.push_front(mine) }
                }
                Some(group.into())
            }
        }
    }

    /// Splits fixed factor `f` into `f` of extent `outer` and a new factor after it; returns
    /// both (outer, inner).
    fn split(&mut self, f: usize, outer: usize) -> (usize, usize) {
        let Extent::Fixed(size) = self.sizes[f] else { unreachable!("only fixed factors split") };
        let inner = self.sizes.len();
        self.sizes.push(Extent::Fixed(size / outer));
        self.sizes[f] = Extent::Fixed(outer);
        for ids in self.input.iter_mut().chain(self.groups.iter_mut()) {
            if let Some(k) = ids.iter().position(|&x| x == f) {
                ids.insert(k + 1, inner);
            }
        }
        (f, inner)
    }

    /// Reshape dims making `groups` (each a run of `order`, the factors of a tensor of dims
    /// `dims`, in its order): a fixed group's length; a lone dynamic factor that is the same
    /// place's dim of that tensor, `0`; one other dynamic group, `-1`. `None` where two need the `-1`.
    fn dims_of(&self, groups: &[Vec<usize>], order: &[Vec<usize>]) -> Option<Vec<i64>> {
        let mut free = true;
        groups
            .iter()
            .enumerate()
            .map(|(i, g)| match self.fixed_product(g) {
                Some(n) => Some(n as i64),
                None if order.get(i) == Some(g) => Some(0),
                None if std::mem::replace(&mut free, false) => Some(-1),
                None => None,
            })
            .collect()
    }

    /// One Shuffle: the source reshaped into its factors and transposed into the output's order;
    /// then, where that is not `output` itself, the dims of the reshape after it.
    fn composed(&self, output: &[Dim]) -> Option<(ShuffleParams, Option<Vec<i64>>)> {
        let source_order = self.input.concat();
        let output_order = self.groups.concat();
        let perm: Vec<usize> = output_order.iter().map(|f| source_order.iter().position(|x| x == f)).collect::<Option<_>>()?;
        if perm.iter().enumerate().all(|(i, &q)| i == q) {
            return Some((reshape(self.dims_of(&self.groups, &self.input)?), None));
        }
        // Each factor a dim of its own, in the source's order, then in the output's.
        let singles = |order: &[usize]| order.iter().map(|&f| vec![f]).collect::<Vec<_>>();
        let factor_dims = self.dims_of(&singles(&source_order), &self.input)?;
        let shuffle = ShuffleParams { second_transpose: perm, ..reshape(factor_dims) };
        let transposed = singles(&output_order);
        let same = transposed.len() == output.len() && transposed.iter().zip(&self.groups).all(|(t, g)| t == g);
        let after = if same { None } else { Some(self.dims_of(&self.groups, &transposed)?) };
        Some((shuffle, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::layer::LayerKind;
    use crate::ir::shape::Shape;
    use crate::DataType;

    fn shuffle(first: &[usize], dims: Option<&[i64]>, second: &[usize]) -> LayerKind {
        LayerKind::Shuffle(ShuffleParams { first_transpose: first.to_vec(), reshape: dims.map(|d| d.to_vec()), second_transpose: second.to_vec(), zero_is_placeholder: true })
    }

    /// A network of `steps` from one f32 input of `shape`, its last output marked.
    fn chain(shape: &[usize], steps: &[LayerKind]) -> Network {
        let mut net = Network::new("chain");
        let mut t = net.add_input("x", DataType::F32, Shape::fixed(shape)).expect("input");
        for (k, kind) in steps.iter().enumerate() {
            let l = net.add_layer(&format!("s{k}"), kind.clone(), vec![Some(t)]).expect("step");
            t = net.output(l, 0);
        }
        net.mark_output(t).expect("output");
        net
    }

    fn run(net: &Network) -> Option<Network> {
        ShuffleChainComposition.run(net, &PassContext::default()).expect("the pass runs")
    }

    fn shuffles(net: &Network) -> Vec<ShuffleParams> {
        net.layers().iter().filter_map(|l| match &l.kind {
            LayerKind::Shuffle(p) => Some(p.clone()),
            _ => None,
        }).collect()
    }

    #[test]
    fn the_dynamo_key_transpose_becomes_one_shuffle() {
        // [b, s, h·d] → [b, s, h, d] → [b, h, s, d] → [b·h, s, d] → [b·h, d, s] → [b, h, d, s]
        let steps = [
            shuffle(&[], Some(&[-1, 8, 3, 4]), &[]),
            shuffle(&[0, 2, 1, 3], None, &[]),
            shuffle(&[], Some(&[-1, 8, 4]), &[]),
            shuffle(&[0, 2, 1], None, &[]),
            shuffle(&[], Some(&[2, 3, 4, 8]), &[]),
        ];
        let net = chain(&[2, 8, 12], &steps);
        let composed = run(&net).expect("a chain to compose");
        let ps = shuffles(&composed);
        assert_eq!(ps.len(), 1, "{}", composed.dump());
        assert_eq!(ps[0].reshape, Some(vec![2, 8, 3, 4]));
        assert_eq!(ps[0].second_transpose, vec![0, 2, 3, 1]);
        assert!(composed.layers().iter().any(|l| l.name == "s0 + s1 + s2 + s3 + s4"), "named after its steps: {}", composed.dump());
    }

    #[test]
    fn a_merged_output_keeps_a_reshape_after_the_transpose() {
        // [a, b, c] → [b, a, c] → [b, a·c] → [b·a, c]: the factors transposed, then merged.
        let steps = [shuffle(&[1, 0, 2], None, &[]), shuffle(&[], Some(&[3, 10]), &[]), shuffle(&[], Some(&[6, 5]), &[])];
        let net = chain(&[2, 3, 5], &steps);
        let composed = run(&net).expect("a chain to compose");
        let ps = shuffles(&composed);
        assert_eq!(ps.len(), 2, "{}", composed.dump());
        assert_eq!(ps[1].reshape, Some(vec![6, 5]));
    }

    #[test]
    fn transposes_that_cancel_leave_a_reshape() {
        let steps = [shuffle(&[0, 2, 1], None, &[]), shuffle(&[], Some(&[4, 1, 5, 6]), &[0, 1, 3, 2]), shuffle(&[], Some(&[24, 5]), &[])];
        let net = chain(&[4, 6, 5], &steps);
        let composed = run(&net).expect("a chain to compose");
        let ps = shuffles(&composed);
        assert_eq!(ps.len(), 1, "{}", composed.dump());
        assert!(ps[0].first_transpose.is_empty() && ps[0].second_transpose.is_empty() && ps[0].reshape == Some(vec![24, 5]));
    }

    #[test]
    fn chains_that_do_not_compose_are_left_alone() {
        // A reshape whose dims cut across a factor ([4, 6] into [3, 8]): no whole parts.
        let across = chain(&[6, 4], &[shuffle(&[1, 0], None, &[]), shuffle(&[], Some(&[3, 8]), &[])]);
        assert!(run(&across).is_none());
        // One Shuffle is not a chain; a tensor read twice ends the chain before it.
        assert!(run(&chain(&[2, 3], &[shuffle(&[1, 0], None, &[])])).is_none());
        let mut shared = chain(&[2, 3, 4], &[shuffle(&[1, 0, 2], None, &[]), shuffle(&[], Some(&[3, 8]), &[])]);
        let first = shared.output(crate::ir::network::LayerId(0), 0);
        shared.mark_output(first).expect("a second output");
        assert!(run(&shared).is_none(), "{}", shared.dump());
    }
}
