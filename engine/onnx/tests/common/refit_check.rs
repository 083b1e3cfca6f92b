//! The refit property on a device backend (included by the wgpu and cuda tests beside
//! `pytorch_data.rs` and `new_weights.rs`): a PyTorch reference model built with weights A and
//! run twice (constants on the device; cuda: a graph captured and replayed), then refitted in
//! place to weights B, gives what an engine built from B gives.

use crate::new_weights::{changed_weights, with_weights};
use crate::pytorch_data::{reference_model, worst_error};
use kiln::refit::Refitter;
use kiln::{Backend, BuilderConfig, BuilderFlag, HostTensor, PreparedEngine};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

pub fn config(flags: &[BuilderFlag]) -> BuilderConfig {
    let mut config = BuilderConfig::default();
    for &f in flags {
        config.set_flag(f);
    }
    config
}

pub fn run(prepared: &Arc<PreparedEngine>, inputs: &HashMap<String, HostTensor>) -> BTreeMap<String, HostTensor> {
    prepared.create_execution_context().run(inputs).expect("run")
}

/// Within `tolerance` of the rebuild after the refit (twice: a replayed graph must not be
/// stale), and not within it before.
pub fn refit_in_place_matches_rebuild(backend: &dyn Backend, name: &str, flags: &[BuilderFlag], tolerance: f64) {
    let (net, inputs, _) = reference_model(name);
    let engine = kiln::Builder::new(backend).build(&net, &config(&[flags, &[BuilderFlag::Refit]].concat())).expect("build A");
    let mut refitter = Refitter::new(&engine).unwrap();
    let weights = changed_weights(&net, &refitter.get_all_weights());
    let rebuilt = kiln::Builder::new(backend).build(&with_weights(&net, &weights), &config(flags)).expect("build B");
    let want = run(&PreparedEngine::new(rebuilt, backend).unwrap(), &inputs);
    let mut prepared = PreparedEngine::new(engine, backend).unwrap();
    run(&prepared, &inputs);
    let before = run(&prepared, &inputs);
    for (n, w) in weights {
        refitter.set_named_weights(&n, w).unwrap();
    }
    let start = Instant::now();
    let changed = refitter.refit_prepared(&mut prepared, backend).unwrap();
    eprintln!("{name} {flags:?}: {changed} weights blobs refitted in {:.2} ms", start.elapsed().as_secs_f64() * 1e3);
    for _ in 0..2 {
        let got = run(&prepared, &inputs);
        for (output, w) in &want {
            let worst = worst_error(&got[output], w);
            assert!(worst < tolerance, "{name}/{output}: relative error {worst} against the engine built from the new weights");
            assert!(worst_error(&before[output], w) > tolerance, "{name}/{output}: the refit changed nothing");
        }
    }
}
