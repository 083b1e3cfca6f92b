//! Refitting prepared wgpu engines in place (seed §6.2): the PyTorch CNN and mini-BERT built
//! with weights A, run (so their constants are on the device), refitted to weights B, give
//! what an engine built from B gives, in f32 and with FP16.

#[allow(dead_code)]
#[path = "../../../engine/onnx/tests/common/pytorch_data.rs"]
mod pytorch_data;
#[allow(dead_code)]
#[path = "../../../engine/onnx/tests/common/new_weights.rs"]
mod new_weights;
#[path = "../../../engine/onnx/tests/common/refit_check.rs"]
mod refit_check;

use kiln::BuilderFlag;
use kiln_wgpu::WgpuBackend;
use refit_check::refit_in_place_matches_rebuild;

fn check(name: &str, flags: &[BuilderFlag], tolerance: f64) {
    if let Err(e) = kiln_wgpu::device::shared() {
        return eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
    }
    refit_in_place_matches_rebuild(&WgpuBackend::new(), name, flags, tolerance);
}

#[test]
fn refitted_cnn_matches_the_rebuild() {
    check("cnn_torchscript", &[], 1e-5);
    check("cnn_torchscript", &[BuilderFlag::Fp16], 1e-3);
}

#[test]
fn refitted_bert_matches_the_rebuild() {
    check("bert_torchscript", &[], 1e-5);
    check("bert_torchscript", &[BuilderFlag::Fp16], 1e-3);
}
