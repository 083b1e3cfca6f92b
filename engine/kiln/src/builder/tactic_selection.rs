//! Choosing one tactic per layer, a build step: the backend offers candidates, the
//! algorithm selector filters them (seed §6.3), the timing cache supplies known times and
//! the backend times the rest (warm-up, median of repetitions).

use crate::backend::{Backend, MathMode};
use crate::device::DeviceFingerprint;
use crate::ir::network::{LayerId, Network};
use crate::tactics::cache::{current_header, CacheEntry, TimingCache};
use crate::tactics::{
    AlgorithmChoice, AlgorithmContext, LayerSignature, TacticError, TacticId, TacticOptions, TacticPlan,
};

/// Chooses a tactic for every layer of `network` (see the module docs).
pub fn choose_tactics(
    backend: &dyn Backend,
    device: &DeviceFingerprint,
    network: &Network,
    math: MathMode,
    options: &TacticOptions,
) -> Result<TacticPlan, TacticError> {
    let mut plan = TacticPlan::default();
    let header = current_header(backend.name(), device);
    let attached = options.timing_cache.as_ref().filter(|_| !options.disable_timing_cache);
    let mut local = TimingCache::new();
    // Lock once for the whole build; a poisoned lock still holds a usable cache.
    let mut guard = attached.map(|c| c.lock().unwrap_or_else(|e| e.into_inner()));
    let cache: &mut TimingCache = match guard.as_deref_mut() {
        Some(c) => c,
        None => &mut local,
    };
    if let Some(w) = cache.check_and_adopt(&header, options.ignore_mismatch)? {
        plan.warnings.push(w);
    }
    let repetitions = if options.repetitions == 0 { 5 } else { options.repetitions };
    let mut reported = Vec::new();
    let report_progress = |done: usize, name: &str| {
        if let Some(p) = &options.progress {
            (p.0)(done, network.layers().len(), name);
        }
    };
    for (i, layer) in network.layers().iter().enumerate() {
        report_progress(i, &layer.name);
        let id = LayerId(i);
        let offered = backend.tactics(network, id, math);
        if offered.is_empty() {
            return Err(TacticError::NoTactic { layer: layer.name.clone() });
        }
        let signature = LayerSignature::of(network, id);
        // Builder settings that change implementations are part of every cache key.
        let key = format!("{signature}/{}", math.cache_settings());
        let cached = cache.get(&key).cloned();
        let time_of = |t: &TacticId| cached.as_ref().and_then(|e| e.candidates.iter().find(|(c, _)| c == t).map(|(_, ns)| *ns));
        let choices: Vec<AlgorithmChoice> =
            offered.iter().map(|t| AlgorithmChoice { tactic: t.clone(), time_ns: time_of(&t.id) }).collect();
        let context = context_of(network, id);
        let allowed = select(options, &context, &choices)?;
        let (pick, timed, source) = if allowed.len() == 1 {
            (allowed[0].tactic.id.clone(), Vec::new(), "the only candidate")
        } else if let Some(hit) = cached.as_ref().and_then(|e| pick_from_cache(e, &allowed)) {
            plan.layers_from_cache += 1;
            (hit, timed_of(cached.as_ref(), &allowed), "from the timing cache")
        } else if options.error_on_timing_cache_miss {
            return Err(TacticError::CacheMiss { layer: layer.name.clone(), signature: key });
        } else {
            let entry = time_candidates(backend, network, id, &signature.kind, &allowed, math, repetitions)?;
            plan.layers_timed += 1;
            let chosen = entry.chosen.clone();
            let entry = merge_entry(cached, entry);
            let timed = timed_of(Some(&entry), &allowed);
            cache.insert(key, entry);
            (chosen, timed, "timed")
        };
        log_choice(&layer.name, &pick, &timed, source);
        plan.timed.push(timed);
        reported.push((context, pick.clone()));
        plan.chosen.push(Some(pick));
    }
    report_progress(network.layers().len(), "");
    if let Some(s) = &options.selector {
        s.0.report_algorithms(&reported);
    }
    Ok(plan)
}

/// A debug event per layer: the tactic, why, and every candidate's median time.
fn log_choice(layer: &str, pick: &TacticId, timed: &[(TacticId, u64)], source: &str) {
    let times: Vec<String> = timed.iter().map(|(id, ns)| format!("{id} {:.4} ms", *ns as f64 * 1e-6)).collect();
    let times = if times.is_empty() { String::new() } else { format!(": {}", times.join(", ")) };
    if timed.is_empty() && source == "the only candidate" {
        tracing::trace!(target: "kiln::tactics", "layer `{layer}`: {pick} ({source})");
    } else {
        tracing::debug!(target: "kiln::tactics", "layer `{layer}`: {pick} ({source}){times}");
    }
}

fn select<'c>(options: &TacticOptions, context: &AlgorithmContext, choices: &'c [AlgorithmChoice]) -> Result<Vec<&'c AlgorithmChoice>, TacticError> {
    let Some(selector) = &options.selector else { return Ok(choices.iter().collect()) };
    let picked = selector.0.select_algorithms(context, choices);
    if picked.is_empty() {
        if options.reject_empty_algorithms {
            return Err(TacticError::EmptySelection { layer: context.layer.clone() });
        }
        return Ok(choices.iter().collect());
    }
    let mut out = Vec::with_capacity(picked.len());
    for index in picked {
        let c = choices.get(index).ok_or_else(|| TacticError::BadSelection {
            layer: context.layer.clone(),
            index,
            count: choices.len(),
        })?;
        if !out.iter().any(|o: &&AlgorithmChoice| o.tactic.id == c.tactic.id) {
            out.push(c);
        }
    }
    Ok(out)
}

/// The times `entry` holds for the allowed candidates, in their order.
fn timed_of(entry: Option<&CacheEntry>, allowed: &[&AlgorithmChoice]) -> Vec<(TacticId, u64)> {
    let Some(entry) = entry else { return Vec::new() };
    allowed
        .iter()
        .filter_map(|c| entry.candidates.iter().find(|(id, _)| *id == c.tactic.id).cloned())
        .collect()
}

/// The cached choice when allowed, else the fastest allowed candidate when the cache
/// timed them all; `None` is a miss.
fn pick_from_cache(entry: &CacheEntry, allowed: &[&AlgorithmChoice]) -> Option<TacticId> {
    if allowed.iter().any(|c| c.tactic.id == entry.chosen) {
        return Some(entry.chosen.clone());
    }
    let times: Option<Vec<(u64, &TacticId)>> = allowed.iter().map(|c| c.time_ns.map(|t| (t, &c.tactic.id))).collect();
    // Ties go to the earlier candidate: min_by_key keeps the first minimum.
    times?.into_iter().min_by_key(|(t, _)| *t).map(|(_, id)| id.clone())
}

fn time_candidates(
    backend: &dyn Backend,
    network: &Network,
    layer: LayerId,
    kind: &str,
    allowed: &[&AlgorithmChoice],
    math: MathMode,
    repetitions: usize,
) -> Result<CacheEntry, TacticError> {
    let mut candidates = Vec::with_capacity(allowed.len());
    for c in allowed {
        let time = backend.time_tactic(network, layer, &c.tactic, math, repetitions).map_err(|source| TacticError::Timing {
            layer: network.layer(layer).name.clone(),
            tactic: c.tactic.id.to_string(),
            source: Box::new(source),
        })?;
        candidates.push((c.tactic.id.clone(), u64::try_from(time.as_nanos()).unwrap_or(u64::MAX)));
    }
    let chosen = candidates.iter().min_by_key(|(_, t)| *t).map(|(id, _)| id.clone()).expect("at least two candidates");
    Ok(CacheEntry { layer_kind: kind.to_string(), chosen, candidates })
}

/// Keeps times an earlier build measured for candidates this one did not time.
fn merge_entry(old: Option<CacheEntry>, mut new: CacheEntry) -> CacheEntry {
    if let Some(old) = old {
        for (id, t) in old.candidates {
            if !new.candidates.iter().any(|(c, _)| *c == id) {
                new.candidates.push((id, t));
            }
        }
    }
    new
}

fn context_of(network: &Network, id: LayerId) -> AlgorithmContext {
    let l = network.layer(id);
    let io = |t: crate::ir::network::TensorId| (network.tensor(t).dtype, network.tensor(t).shape.clone());
    let anchor = match &l.kind {
        crate::ir::layer::LayerKind::Fused(p) => Some(p.anchor.kind().type_name().to_string()),
        crate::ir::layer::LayerKind::Quantized(p) => Some(p.anchor.kind().type_name().to_string()),
        _ => None,
    };
    AlgorithmContext {
        layer: l.name.clone(),
        kind: l.kind.type_name().to_string(),
        anchor,
        inputs: l.inputs.iter().flatten().map(|&t| io(t)).collect(),
        outputs: l.outputs.iter().map(|&t| io(t)).collect(),
    }
}
