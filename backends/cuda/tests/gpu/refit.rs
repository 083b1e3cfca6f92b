//! Refitting prepared cuda engines in place (seed §6.2): the PyTorch CNN and mini-BERT built
//! with weights A and run (constants uploaded, cuDNN filters converted, CUDA graphs captured)
//! then refitted to weights B give what an engine built from B gives; a hundred and fifty
//! refits of one engine leave device memory where it was.

use crate::common::backend;
use crate::new_weights::{changed_weights, with_weights};
use crate::pytorch_data::reference_model;
use crate::refit_check::{config, refit_in_place_matches_rebuild, run};
use kiln::refit::Refitter;
use kiln::{BuilderFlag, HostTensor, PreparedEngine};
use std::sync::Arc;
use std::time::Instant;

fn check(name: &str, flags: &[BuilderFlag], tolerance: f64) {
    let Some(cuda) = backend() else { return };
    refit_in_place_matches_rebuild(cuda, name, flags, tolerance);
}

#[test]
fn refitted_cnn_matches_the_rebuild() {
    check("cnn_torchscript", &[], 1e-4);
    check("cnn_torchscript", &[BuilderFlag::Fp16], 1e-3);
}

#[test]
fn refitted_bert_matches_the_rebuild() {
    check("bert_torchscript", &[], 1e-4);
    check("bert_torchscript", &[BuilderFlag::Fp16], 1e-3);
}

#[test]
fn refits_leave_device_memory_where_it_was() {
    let Some(cuda) = backend() else { return };
    let gpu = cuda.gpu().expect("gpu");
    let (net, inputs, _) = reference_model("cnn_torchscript");
    let engine = kiln::Builder::new(cuda).build(&net, &config(&[BuilderFlag::Refit])).expect("build");
    let mut refitter = Refitter::new(&engine).unwrap();
    let names = refitter.get_all_weights();
    let a = changed_weights(&net, &names);
    let b = changed_weights(&with_weights(&net, &a), &names);
    let mut prepared = PreparedEngine::new(engine, cuda).unwrap();
    let mut refit_to = |weights: &[(String, HostTensor)], prepared: &mut Arc<PreparedEngine>| {
        for (n, w) in weights {
            refitter.set_named_weights(n, w.clone()).unwrap();
        }
        refitter.refit_prepared(prepared, cuda).unwrap();
        run(prepared, &inputs);
        run(prepared, &inputs);
    };
    for i in 0..10 {
        refit_to(if i % 2 == 0 { &a } else { &b }, &mut prepared);
    }
    // The device's memory in use is every test's: the tests running beside this one allocate
    // too. A leak grows every window of refits; their allocations rarely land in all of them,
    // so the least growth of three windows of 50 is the refits' own (a leak of 40 KB a refit
    // grows each by 2 MiB).
    let start = Instant::now();
    let mut growths = Vec::new();
    for _ in 0..3 {
        let settled = gpu.memory_in_use().expect("memory");
        for i in 0..50 {
            refit_to(if i % 2 == 0 { &a } else { &b }, &mut prepared);
        }
        growths.push(gpu.memory_in_use().expect("memory") as i64 - settled as i64);
    }
    let per_refit = start.elapsed().as_secs_f64() * 1e3 / 150.0;
    let least = *growths.iter().min().expect("three windows");
    eprintln!("150 refits (each with two runs): {per_refit:.2} ms per refit and runs; device memory growth per window of 50: {growths:?} bytes");
    assert!(least < 2 << 20, "device memory grew by at least {least} bytes in every window of 50 refits ({growths:?})");
}
