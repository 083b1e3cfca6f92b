//! Shuffle chains composed (the numbers are checked on the cpu backend: kiln-cpu's pass tests): consecutive Shuffles, each the only reader of the one before, with
//! fixed shapes, become one Shuffle (and a reshape after it where the output needs one). The
//! composed layer splits its input's dims into the finest factors any step of the chain splits
//! them into, transposes those factors once, and merges only at the end.
//!
//! A step that merges dims which an earlier transpose moved apart cannot be a view: a backend
//! that keeps views (cuda) copies there. The dynamo exporter writes a transformer's key
//! transpose as reshape → transpose → reshape (batch and heads merged) → transpose → reshape
//! (split back), so every layer copied K; composed, it is the legacy exporter's reshape and
//! transpose, a strided view of the projection's output.

use super::graph::{consumers, has_control_flow, known_value};
use super::{Pass, PassContext, PassError};
use crate::ir::layer::{LayerKind, ShuffleParams};
use crate::ir::network::{Network, TensorId};
use crate::ir::rewrite::Rewriter;
use std::collections::HashMap;

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
        let skipped: std::collections::HashSet<usize> = chains.values().flat_map(|c| c.layers[..c.layers.len() - 1].iter().copied()).collect();
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
                    rb.add(&format!("{name} (merged)"), LayerKind::Shuffle(reshape(dims)), vec![Some(factors[0])], &[out])?;
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
    reshape_after: Option<Vec<usize>>,
}

fn reshape(dims: &[usize]) -> ShuffleParams {
    ShuffleParams { first_transpose: vec![], reshape: Some(dims.iter().map(|&d| d as i64).collect()), second_transpose: vec![], zero_is_placeholder: false }
}

/// Every chain of two or more Shuffles that composes into fewer layers, keyed by its last layer.
fn composable_chains(net: &Network) -> HashMap<usize, Chain> {
    let readers = consumers(net);
    let fixed = |t: TensorId| net.tensor(t).shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<usize>>>();
    // A Shuffle with fixed input and output shapes and no run-time dims.
    let plain = |i: usize| {
        let l = &net.layers()[i];
        let LayerKind::Shuffle(p) = &l.kind else { return None };
        let dims_known = l.inputs.get(1).copied().flatten().is_none_or(|t| known_value(net, t).is_some());
        let input = (*l.inputs.first()?)?;
        (dims_known && l.outputs.len() == 1 && fixed(input).is_some() && fixed(l.outputs[0]).is_some()).then_some((p, input))
    };
    // The Shuffle producing `t`, when it is `t`'s only reader's only source of it.
    let chained_producer = |t: TensorId| {
        if readers[t.0].len() != 1 || net.outputs().contains(&t) {
            return None;
        }
        let (producer, _) = net.tensor(t).producer?;
        plain(producer.0).map(|_| producer.0)
    };
    let mut chains = HashMap::new();
    for i in 0..net.layers().len() {
        let Some((_, input)) = plain(i) else { continue };
        // Only a chain's last layer starts the walk back.
        let out = net.layers()[i].outputs[0];
        let extends = readers[out.0].len() == 1 && !net.outputs().contains(&out) && plain(readers[out.0][0].0).is_some();
        if extends {
            continue;
        }
        let mut layers = vec![i];
        let mut source = input;
        while let Some(p) = chained_producer(source) {
            layers.push(p);
            source = plain(p).map(|(_, t)| t).expect("a plain Shuffle");
        }
        layers.reverse();
        if layers.len() < 2 {
            continue;
        }
        let (Some(input_shape), Some(output_shape)) = (fixed(source), fixed(out)) else { continue };
        let mut factors = Factors::new(&input_shape);
        let steps_fit = layers.iter().all(|&k| {
            let l = &net.layers()[k];
            let (p, _) = plain(k).expect("a plain Shuffle");
            factors.shuffle(p, &fixed(l.outputs[0]).expect("fixed"))
        });
        if !steps_fit {
            continue;
        }
        let (composed, reshape_after) = factors.composed(&output_shape);
        if 1 + reshape_after.is_some() as usize >= layers.len() {
            continue;
        }
        chains.insert(i, Chain { layers, source, composed, reshape_after });
    }
    chains
}

/// A tensor's dims as groups of factors of its source's dims: `sizes[f]` is factor f's
/// extent, `input[d]` the factors source dim d splits into (outermost first), `groups[d]` the
/// factors the current dim d merges (outermost first). Size-1 dims have no factors.
struct Factors {
    sizes: Vec<usize>,
    input: Vec<Vec<usize>>,
    groups: Vec<Vec<usize>>,
}

impl Factors {
    fn new(shape: &[usize]) -> Factors {
        let mut f = Factors { sizes: vec![], input: vec![], groups: vec![] };
        for &d in shape {
            let ids = if d > 1 {
                f.sizes.push(d);
                vec![f.sizes.len() - 1]
            } else {
                vec![]
            };
            f.input.push(ids.clone());
            f.groups.push(ids);
        }
        f
    }

    /// Applies one Shuffle ending at `out` (its resolved shape); false where a step splits a
    /// factor other than into whole parts of it (no composition then).
    fn shuffle(&mut self, p: &ShuffleParams, out: &[usize]) -> bool {
        if !p.first_transpose.is_empty() && !self.permute(&p.first_transpose) {
            return false;
        }
        if p.reshape.is_some() {
            // The shape between the reshape and the second transpose: out[i] = mid[perm[i]].
            let mut mid = out.to_vec();
            if !p.second_transpose.is_empty() {
                if p.second_transpose.len() != out.len() {
                    return false;
                }
                for (i, &q) in p.second_transpose.iter().enumerate() {
                    mid[q] = out[i];
                }
            }
            if !self.regroup(&mid) {
                return false;
            }
        }
        if !p.second_transpose.is_empty() && !self.permute(&p.second_transpose) {
            return false;
        }
        self.extents() == out
    }

    fn permute(&mut self, perm: &[usize]) -> bool {
        if perm.len() != self.groups.len() || perm.iter().any(|&q| q >= perm.len()) {
            return false;
        }
        self.groups = perm.iter().map(|&q| self.groups[q].clone()).collect();
        true
    }

    /// The current factors, in row-major order, grouped into `dims`: a dim takes whole factors
    /// while they divide what it still needs, and splits the next one where what it needs
    /// divides it (the outer part its own, the inner part the next dim's).
    fn regroup(&mut self, dims: &[usize]) -> bool {
        let mut queue: std::collections::VecDeque<usize> = self.groups.concat().into();
        let mut groups = Vec::with_capacity(dims.len());
        for &d in dims {
            let (mut group, mut need) = (vec![], d);
            while need > 1 {
                let Some(f) = queue.pop_front() else { return false };
                let size = self.sizes[f];
                if need.is_multiple_of(size) {
                    group.push(f);
                    need /= size;
                } else if size.is_multiple_of(need) {
                    let inner = self.split(f, need);
                    group.push(f);
                    queue.push_front(inner);
                    need = 1;
                } else {
                    return false;
                }
            }
            groups.push(group);
        }
        self.groups = groups;
        queue.is_empty()
    }

    /// Splits factor `f` into `f` of extent `outer` and a new factor after it; returns the new one.
    fn split(&mut self, f: usize, outer: usize) -> usize {
        let inner = self.sizes.len();
        self.sizes.push(self.sizes[f] / outer);
        self.sizes[f] = outer;
        for ids in self.input.iter_mut().chain(self.groups.iter_mut()) {
            if let Some(k) = ids.iter().position(|&x| x == f) {
                ids.insert(k + 1, inner);
            }
        }
        inner
    }

    fn extents(&self) -> Vec<usize> {
        self.groups.iter().map(|g| g.iter().map(|&f| self.sizes[f]).product()).collect()
    }

    /// One Shuffle: the source reshaped into its factors and transposed into the output's order;
    /// then, where that is not `output` itself, the dims of the reshape after it.
    fn composed(&self, output: &[usize]) -> (ShuffleParams, Option<Vec<usize>>) {
        let source_order = self.input.concat();
        let output_order = self.groups.concat();
        let perm: Vec<usize> = output_order.iter().map(|f| source_order.iter().position(|x| x == f).expect("every factor is the source's")).collect();
        let identity = perm.iter().enumerate().all(|(i, &q)| i == q);
        if identity {
            return (reshape(output), None);
        }
        let factor_dims: Vec<usize> = source_order.iter().map(|&f| self.sizes[f]).collect();
        let transposed: Vec<usize> = output_order.iter().map(|&f| self.sizes[f]).collect();
        let shuffle = ShuffleParams { second_transpose: perm, ..reshape(&factor_dims) };
        (shuffle, (transposed != output).then(|| output.to_vec()))
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
