//! ResNet-50 (torchvision, random weights, exported on the GPU machine by
//! `gpu/resnet50_peers.py`) built in fp16 by the builder with timed tactics, checked against
//! PyTorch's f32 output at batch 1, then timed on the device (CUDA events, warm-up, median) at
//! batch 1 and 128. Runs only with `KILN_RESNET50_DIR` naming the folder of the exports.

use crate::common::backend;
use kiln::{DataType, HostTensor, TensorData};
use std::path::PathBuf;

fn relative_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

fn read_f32(archive: &mut npyz::npz::NpzArchive<std::io::BufReader<std::fs::File>>, name: &str) -> HostTensor {
    let npy = archive.by_name(name).expect("read").expect("array exists");
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    HostTensor::new(shape, TensorData::F32(npy.into_vec::<f32>().expect("f32"))).unwrap()
}

#[test]
fn bench_resnet50_fp16() {
    let Some(dir) = std::env::var_os("KILN_RESNET50_DIR").map(PathBuf::from) else {
        eprintln!("SKIPPED: set KILN_RESNET50_DIR to the folder of gpu/resnet50_peers.py's exports (GPU machine)");
        return;
    };
    let Some(cuda) = backend() else { return };
    for batch in [1usize, 128] {
        let net = kiln_onnx::import_file(&dir.join(format!("resnet50_b{batch}.onnx"))).expect("import");
        let mut config = kiln::BuilderConfig::default();
        config.set_flag(kiln::BuilderFlag::Fp16);
        let cache = config.set_timing_cache(kiln::TimingCache::new(), false);
        let started = std::time::Instant::now();
        let engine = kiln::Builder::new(cuda).build(&net, &config).expect("fp16 build");
        println!("BENCH resnet50 b{batch}: build with timed tactics {:.1} s", started.elapsed().as_secs_f64());
        // Per convolution: the chosen tactic and the direct kernel's time (the conv-layer figures).
        let (mut chosen_ns, mut direct_ns) = (0u64, 0u64);
        for (_, e) in cache.lock().unwrap().entries() {
            let best = e.candidates.iter().map(|(_, ns)| *ns).min().unwrap_or(0);
            let direct = e.candidates.iter().find(|(id, _)| id.to_string().contains("conv_direct")).map(|(_, ns)| *ns);
            if let Some(d) = direct {
                chosen_ns += best;
                direct_ns += d;
                if batch == 128 {
                    println!(
                        "CONV {} chosen {} {:.3} ms, direct {:.3} ms",
                        e.layer_kind,
                        e.chosen,
                        best as f64 * 1e-6,
                        d as f64 * 1e-6
                    );
                }
            }
        }
        println!(
            "BENCH resnet50 b{batch}: sum over convolutions: chosen {:.3} ms, direct kernel {:.3} ms",
            chosen_ns as f64 * 1e-6,
            direct_ns as f64 * 1e-6
        );
        let exe = cuda.prepare_cuda_plan(engine.network(), engine.control_flow(), engine.tactics(), engine.math()).expect("prepare");
        let gpu = exe.gpu().clone();
        let input = if batch == 1 {
            let mut npz = npyz::npz::NpzArchive::open(dir.join("resnet50_b1.npz")).expect("npz");
            let (x, want) = (read_f32(&mut npz, "input"), read_f32(&mut npz, "logits"));
            let got = kiln::Executable::execute(&exe, std::slice::from_ref(&x)).expect("run");
            let err = relative_l2(&got[0].to_f64_vec(), &want.to_f64_vec());
            println!("BENCH resnet50 b1 fp16 vs PyTorch f32: relative L2 {err:.2e}");
            assert!(err < 3e-2, "ResNet-50 fp16 differs from PyTorch by {err}");
            x
        } else {
            crate::common::random(&mut crate::common::rng(5), DataType::F32, &[batch, 3, 224, 224])
        };
        let x = gpu.upload(&input).unwrap();
        let mut times = gpu
            .time_ms(50, || exe.execute_device(std::slice::from_ref(&x)).map(drop).map_err(|e| e.to_string()))
            .expect("time");
        times.sort_by(f32::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "BENCH resnet50 fp16 b{batch}: kiln median {median:.3} ms (min {:.3}), {:.0} img/s",
            times[0],
            batch as f64 / (median as f64 * 1e-3)
        );
    }
}
