//! Memory planning: every activation tensor gets an offset in one arena, sized at the
//! largest shapes a profile admits, so tensors whose lifetimes do not overlap share memory.
//!
//! Lifetimes are measured in top-level steps of the engine's lowered control flow: a tensor
//! lives from the step that produces it to the last step that reads it. A loop or
//! conditional region is one step, so tensors inside it are (conservatively) live for the
//! whole region. Network inputs and outputs live in the caller's buffers and weights in
//! the weights section; neither is in the arena. Tensors whose size no profile bounds (a
//! dynamic dim without a profile, a data-dependent shape) are listed as unplanned: they
//! are allocated per run.

use crate::ir::control::{ControlFlow, Step};
use crate::ir::layer::LayerKind;
use crate::ir::network::{Network, TensorId};
use crate::ir::shape::Shape;
use crate::profile::{OptimizationProfile, Range};
use crate::ir::infer::network_shapes::{infer_shapes, BoundInput, ShapeInferenceFailure};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};

/// Every offset and size in the arena is a multiple of this.
pub const ARENA_ALIGNMENT: u64 = 256;

/// A block to place: `size` bytes live during steps `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub size: u64,
    pub first: usize,
    pub last: usize,
}

impl Lifetime {
    fn overlaps(&self, other: &Lifetime) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// One activation tensor's place in the arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedTensor {
    pub tensor: TensorId,
    pub name: String,
    pub offset: u64,
    /// Bytes reserved (the tensor's size at the profile's max shapes, rounded up to
    /// [`ARENA_ALIGNMENT`]).
    pub size: u64,
    pub first_step: usize,
    pub last_step: usize,
}

/// The arena layout for one optimization profile (or for the declared shapes when the
/// engine has no profile).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlan {
    pub tensors: Vec<PlannedTensor>,
    /// Arena size: the highest end offset of any planned tensor.
    pub peak_bytes: u64,
    /// What the tensors would take without sharing (the sum of their sizes).
    pub unshared_bytes: u64,
    /// Activation tensors whose size is not bounded at build time; allocated per run.
    pub unplanned: Vec<String>,
}

fn align_up(n: u64) -> u64 {
    n.div_ceil(ARENA_ALIGNMENT) * ARENA_ALIGNMENT
}

/// Above this many blocks, [`pack`] places them in step order instead of largest first:
/// the largest-first search scans every placed block for each new one (quadratic), which
/// takes seconds from about this size on.
pub const LARGEST_FIRST_MAX_BLOCKS: usize = 16_384;

/// Places blocks so that blocks live at the same step never share bytes. Returns each
/// block's offset and the arena size. Sizes are rounded up to [`ARENA_ALIGNMENT`]. Up to
/// [`LARGEST_FIRST_MAX_BLOCKS`] blocks, largest first into the smallest fitting gap (the
/// tighter arena); beyond that, in step order with freed space reused best-fit, in
/// O(n log n).
pub fn pack(blocks: &[Lifetime]) -> (Vec<u64>, u64) {
    if blocks.len() <= LARGEST_FIRST_MAX_BLOCKS {
        pack_largest_first(blocks)
    } else {
        pack_in_step_order(blocks)
    }
}

/// Largest first, each into the smallest gap (among blocks already placed that are live
/// at the same time) that holds it, or above them all.
fn pack_largest_first(blocks: &[Lifetime]) -> (Vec<u64>, u64) {
    let mut offsets = vec![0u64; blocks.len()];
    // Placed blocks by (offset, end), so those live with a new block come in address order
    // without sorting them for every block.
    let mut placed: BTreeSet<(u64, u64, usize)> = BTreeSet::new();
    let mut peak = 0u64;
    for i in placement_order(blocks) {
        let size = align_up(blocks[i].size);
        if size == 0 {
            continue;
        }
        let busy = placed.iter().filter(|&&(_, _, j)| blocks[j].overlaps(&blocks[i]));
        let mut best: Option<(u64, u64)> = None; // (gap size, offset)
        let mut cursor = 0u64;
        for &(start, end, _) in busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        offsets[i] = offset;
        peak = peak.max(offset + size);
        placed.insert((offset, offset + size, i));
    }
    (offsets, peak)
}

/// Blocks in order of their first step (larger first within a step). Before each block,
/// the blocks that died at an earlier step return their space to a free list, merged with
/// free neighbours; the block takes the smallest free range that holds it, or else grows
/// the arena (from the free range at its top, if there is one).
fn pack_in_step_order(blocks: &[Lifetime]) -> (Vec<u64>, u64) {
    use std::cmp::Reverse;
    use std::collections::{BTreeMap, BinaryHeap};
    let mut offsets = vec![0u64; blocks.len()];
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].size > 0).collect();
    order.sort_by_key(|&i| (blocks[i].first, Reverse(blocks[i].size), i));
    let mut free_by_start: BTreeMap<u64, u64> = BTreeMap::new(); // start → end
    let mut free_by_size: BTreeSet<(u64, u64)> = BTreeSet::new(); // (size, start)
    let mut live: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new(); // (last step, block)
    let mut peak = 0u64;
    for i in order {
        while let Some(&Reverse((last, j))) = live.peek() {
            if last >= blocks[i].first {
                break;
            }
            live.pop();
            let (mut start, mut end) = (offsets[j], offsets[j] + align_up(blocks[j].size));
            if let Some((&s, &e)) = free_by_start.range(..start).next_back() {
                if e == start {
                    free_by_start.remove(&s);
                    free_by_size.remove(&(e - s, s));
                    start = s;
                }
            }
            if let Some(e) = free_by_start.remove(&end) {
                free_by_size.remove(&(e - end, end));
                end = e;
            }
            free_by_start.insert(start, end);
            free_by_size.insert((end - start, start));
        }
        let size = align_up(blocks[i].size);
        let fit = free_by_size.range((size, 0)..).next().copied();
        let offset = match fit {
            Some((free, start)) => {
                free_by_size.remove(&(free, start));
                free_by_start.remove(&start);
                if free > size {
                    free_by_start.insert(start + size, start + free);
                    free_by_size.insert((free - size, start + size));
                }
                start
            }
            None => match free_by_start.last_key_value() {
                Some((&start, &end)) if end == peak => {
                    free_by_start.remove(&start);
                    free_by_size.remove(&(end - start, start));
                    start
                }
                _ => peak,
            },
        };
        offsets[i] = offset;
        peak = peak.max(offset + size);
        live.push(Reverse((blocks[i].last, i)));
    }
    (offsets, peak)
}

/// Largest first; among equal sizes, earliest first.
fn placement_order(blocks: &[Lifetime]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(blocks[i].size), blocks[i].first, i));
    order
}

/// The top-level step that runs each layer (a region's layers all map to its step).
fn layer_steps(network: &Network, control: &ControlFlow) -> Vec<usize> {
    let mut steps: Vec<usize> = (0..network.layers().len()).collect();
    for (i, step) in control.body.steps.iter().enumerate() {
        let layers = match step {
            Step::Layer(l) => vec![*l],
            region => crate::ir::control::Block { steps: vec![region.clone()] }.layers(),
        };
        for l in layers {
            if let Some(s) = steps.get_mut(l.0) {
                *s = i;
            }
        }
    }
    steps
}

/// Plans the arena for the given tensor shapes (one per tensor, e.g. from run-time shape
/// inference at a profile's max shapes).
pub fn plan(network: &Network, control: &ControlFlow, shapes: &[Shape]) -> MemoryPlan {
    let steps = layer_steps(network, control);
    let mut last_use: Vec<Option<usize>> = vec![None; network.tensors().len()];
    for (l, layer) in network.layers().iter().enumerate() {
        for t in layer.inputs.iter().flatten() {
            let slot = &mut last_use[t.0];
            *slot = Some(slot.map_or(steps[l], |s| s.max(steps[l])));
        }
    }
    let outputs: HashSet<TensorId> = network.outputs().iter().copied().collect();
    let mut candidates = Vec::new();
    let mut unplanned = Vec::new();
    for (l, layer) in network.layers().iter().enumerate() {
        if matches!(layer.kind, LayerKind::Constant { .. }) {
            continue;
        }
        for &t in &layer.outputs {
            if outputs.contains(&t) {
                continue;
            }
            let desc = network.tensor(t);
            let bytes = shapes
                .get(t.0)
                .and_then(Shape::volume)
                .and_then(|v| (v as u64).checked_mul(desc.dtype.size_bytes()? as u64));
            let Some(bytes) = bytes else {
                unplanned.push(desc.name.clone());
                continue;
            };
            let first = steps[l];
            let last = last_use[t.0].map_or(first, |s| s.max(first));
            candidates.push((t, Lifetime { size: bytes, first, last }));
        }
    }
    let blocks: Vec<Lifetime> = candidates.iter().map(|(_, b)| *b).collect();
    let (offsets, peak_bytes) = pack(&blocks);
    let tensors: Vec<PlannedTensor> = candidates
        .iter()
        .zip(offsets)
        .map(|((t, b), offset)| PlannedTensor {
            tensor: *t,
            name: network.tensor(*t).name.clone(),
            offset,
            size: align_up(b.size),
            first_step: b.first,
            last_step: b.last,
        })
        .collect();
    let unshared_bytes = tensors.iter().map(|t| t.size).sum();
    MemoryPlan { tensors, peak_bytes, unshared_bytes, unplanned }
}

/// Which point of a profile's ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfilePoint {
    Min,
    Opt,
    Max,
}

impl ProfilePoint {
    fn pick<T>(self, r: &Range<T>) -> &[T] {
        match self {
            ProfilePoint::Min => &r.min,
            ProfilePoint::Opt => &r.opt,
            ProfilePoint::Max => &r.max,
        }
    }
}

/// The network inputs bound at one point of a profile: the dims it gives (declared dims
/// for inputs it does not name) and the values of its shape tensors.
pub fn profile_inputs(network: &Network, profile: &OptimizationProfile, point: ProfilePoint) -> Vec<BoundInput> {
    network
        .inputs()
        .iter()
        .filter_map(|&t| {
            let desc = network.tensor(t);
            let dims = match profile.dimensions(&desc.name) {
                Some(r) => point.pick(r).to_vec(),
                None => desc.shape.as_fixed()?,
            };
            let value = profile.shape_values(&desc.name).and_then(|r| shape_tensor(desc.dtype, &dims, point.pick(r)));
            Some(BoundInput { tensor: t, dims, value })
        })
        .collect()
}

/// A shape tensor's value as a host tensor of its input's type.
pub fn shape_tensor(dtype: crate::DataType, dims: &[usize], values: &[i64]) -> Option<crate::HostTensor> {
    let data = match dtype {
        crate::DataType::I64 => crate::TensorData::I64(values.to_vec()),
        crate::DataType::I32 => {
            crate::TensorData::I32(values.iter().map(|&v| i32::try_from(v).ok()).collect::<Option<Vec<i32>>>()?)
        }
        _ => return None,
    };
    crate::HostTensor::new(dims.to_vec(), data).ok()
}

/// One plan per profile at its max shapes; without profiles, one plan at the declared shapes.
pub fn plan_profiles(
    network: &Network,
    control: &ControlFlow,
    profiles: &[OptimizationProfile],
) -> Result<Vec<MemoryPlan>, ShapeInferenceFailure> {
    if profiles.is_empty() {
        let shapes: Vec<Shape> = network.tensors().iter().map(|d| d.shape.clone()).collect();
        return Ok(vec![plan(network, control, &shapes)]);
    }
    profiles
        .iter()
        .map(|p| Ok(plan(network, control, &infer_shapes(network, &profile_inputs(network, p, ProfilePoint::Max))?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: a seeded generator, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
        }
    }

    fn check_no_overlap(blocks: &[Lifetime], offsets: &[u64], peak: u64) {
        for i in 0..blocks.len() {
            assert_eq!(offsets[i] % ARENA_ALIGNMENT, 0, "block {i} misaligned");
            let end_i = offsets[i] + align_up(blocks[i].size);
            assert!(end_i <= peak, "block {i} ends past the arena");
            for j in i + 1..blocks.len() {
                if blocks[i].size == 0 || blocks[j].size == 0 || !blocks[i].overlaps(&blocks[j]) {
                    continue;
                }
                let end_j = offsets[j] + align_up(blocks[j].size);
                assert!(
                    end_i <= offsets[j] || end_j <= offsets[i],
                    "blocks {i} {:?}@{} and {j} {:?}@{} are live together and overlap",
                    blocks[i],
                    offsets[i],
                    blocks[j],
                    offsets[j]
                );
            }
        }
    }

    #[test]
    fn a_chain_reuses_memory() {
        // x0 → x1 → x2 → x3: each lives two steps, so two slots suffice.
        let blocks: Vec<Lifetime> = (0..4).map(|i| Lifetime { size: 1000, first: i, last: i + 1 }).collect();
        let (offsets, peak) = pack(&blocks);
        check_no_overlap(&blocks, &offsets, peak);
        assert_eq!(peak, 2 * 1024);
        assert!(peak < blocks.iter().map(|b| align_up(b.size)).sum());
    }

    #[test]
    fn sizes_are_rounded_to_the_alignment() {
        let blocks = [Lifetime { size: 1, first: 0, last: 0 }, Lifetime { size: 257, first: 0, last: 0 }];
        let (offsets, peak) = pack(&blocks);
        check_no_overlap(&blocks, &offsets, peak);
        assert_eq!(peak, 256 + 512);
    }

    #[test]
    fn a_freed_gap_is_reused_by_a_smaller_block() {
        let blocks = [
            Lifetime { size: 4096, first: 0, last: 1 },
            Lifetime { size: 8192, first: 0, last: 3 },
            Lifetime { size: 2048, first: 2, last: 3 },
        ];
        let (offsets, peak) = pack(&blocks);
        check_no_overlap(&blocks, &offsets, peak);
        assert_eq!(peak, 8192 + 4096, "the late small block reuses the early block's space");
    }

    /// The packing as first written: every placed block live with the new one, collected
    /// and sorted by address for each block.
    fn pack_by_sorting(blocks: &[Lifetime]) -> (Vec<u64>, u64) {
        let mut offsets = vec![0u64; blocks.len()];
        let mut placed: Vec<usize> = Vec::new();
        let mut peak = 0u64;
        for i in placement_order(blocks) {
            let size = align_up(blocks[i].size);
            if size == 0 {
                continue;
            }
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| blocks[j].overlaps(&blocks[i]))
                .map(|&j| (offsets[j], offsets[j] + align_up(blocks[j].size)))
                .collect();
            busy.sort_unstable();
            let (mut best, mut cursor): (Option<(u64, u64)>, u64) = (None, 0);
            for &(start, end) in &busy {
                if start > cursor && start - cursor >= size && best.is_none_or(|(g, _)| start - cursor < g) {
                    best = Some((start - cursor, cursor));
                }
                cursor = cursor.max(end);
            }
            offsets[i] = best.map_or(cursor, |(_, o)| o);
            peak = peak.max(offsets[i] + size);
            placed.push(i);
        }
        (offsets, peak)
    }

    #[test]
    fn blocks_go_where_sorting_every_live_set_put_them() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for case in 0..400 {
            let n = 1 + rng.next(60) as usize;
            let steps = 1 + rng.next(50) as usize;
            let blocks: Vec<Lifetime> = (0..n)
                .map(|_| {
                    let first = rng.next(steps as u64) as usize;
                    let last = first + rng.next(12) as usize;
                    // Few distinct sizes, so equal gaps and exact fits happen.
                    Lifetime { size: rng.next(6) * 300, first, last }
                })
                .collect();
            assert_eq!(pack(&blocks), pack_by_sorting(&blocks), "case {case}: {blocks:?}");
        }
    }

    fn random_blocks(rng: &mut Rng, n: usize, steps: u64, span: u64, max_size: u64) -> Vec<Lifetime> {
        (0..n)
            .map(|_| {
                let first = rng.next(steps) as usize;
                let last = first + rng.next(span) as usize;
                Lifetime { size: rng.next(max_size), first, last }
            })
            .collect()
    }

    #[test]
    fn step_order_packing_never_overlaps_and_reuses_freed_space() {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        for case in 0..300 {
            let n = 1 + rng.next(80) as usize;
            let blocks = random_blocks(&mut rng, n, 40, 8, 5000);
            let (offsets, peak) = pack_in_step_order(&blocks);
            check_no_overlap(&blocks, &offsets, peak);
            let sum: u64 = blocks.iter().map(|b| align_up(b.size)).sum();
            assert!(peak <= sum, "case {case}: peak {peak} > sum {sum}");
        }
        // A chain needs two slots; a freed pair of neighbours merges to hold a block twice
        // their size.
        let chain: Vec<Lifetime> = (0..1000).map(|i| Lifetime { size: 1000, first: i, last: i + 1 }).collect();
        assert_eq!(pack_in_step_order(&chain).1, 2 * 1024);
        let merge = [
            Lifetime { size: 1024, first: 0, last: 0 },
            Lifetime { size: 1024, first: 0, last: 0 },
            Lifetime { size: 2048, first: 1, last: 1 },
        ];
        assert_eq!(pack_in_step_order(&merge), (vec![0, 1024, 0], 2048));
    }

    #[test]
    fn many_blocks_live_together_pack_in_step_order() {
        // Half the blocks live to the end (a wide graph's branches): largest-first placement
        // would scan every placed block for each one.
        let n = LARGEST_FIRST_MAX_BLOCKS * 4;
        let blocks: Vec<Lifetime> =
            (0..n).map(|i| Lifetime { size: 256, first: i, last: if i % 2 == 0 { n } else { i + 1 } }).collect();
        let (offsets, peak) = pack(&blocks);
        assert_eq!((offsets.clone(), peak), pack_in_step_order(&blocks));
        assert_eq!(peak, (n as u64 / 2 + 1) * 256, "the short-lived blocks share one slot");
        check_no_overlap(&blocks[..2000], &offsets[..2000], peak);
    }

    #[test]
    fn random_lifetimes_never_overlap() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..300 {
            let n = 1 + rng.next(40) as usize;
            let blocks: Vec<Lifetime> = (0..n)
                .map(|_| {
                    let first = rng.next(30) as usize;
                    let last = first + rng.next(8) as usize;
                    Lifetime { size: rng.next(5000), first, last }
                })
                .collect();
            let (offsets, peak) = pack(&blocks);
            check_no_overlap(&blocks, &offsets, peak);
            // The arena never needs more than every block side by side.
            let sum: u64 = blocks.iter().map(|b| align_up(b.size)).sum();
            assert!(peak <= sum, "case {case}: peak {peak} > sum {sum}");
            // …nor less than what is live at the busiest step.
            let busiest = (0..40)
                .map(|s| blocks.iter().filter(|b| b.first <= s && s <= b.last).map(|b| align_up(b.size)).sum::<u64>())
                .max()
                .unwrap_or(0);
            assert!(peak >= busiest, "case {case}: peak {peak} < live bytes {busiest}");
        }
    }
}
