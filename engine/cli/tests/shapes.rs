//! `kiln run --shapes` and `kiln build --min-shapes/--opt-shapes/--max-shapes` on the
//! PyTorch CNN whose `image` input has a dynamic batch (`[batch,3,32,32]`).

mod common;

use common::*;
use std::path::PathBuf;
use tempfile::TempDir;

fn cnn() -> PathBuf {
    repo_path("tests/data/pytorch/cnn_torchscript.onnx")
}

#[test]
fn run_takes_dynamic_dims_from_shapes() {
    let model = cnn();
    let stdout = kiln_ok(&["run", path_arg(&model), "--backend", "cpu", "--shapes", "image:3x3x32x32"]);
    assert!(stdout.contains("`image`: f32[3,3,32,32]"), "{stdout}");
    assert!(stdout.contains("`probs`: f32[3,"), "{stdout}");
}

#[test]
fn run_shapes_must_agree_with_the_model_and_the_inputs_file() {
    let dir = TempDir::new().unwrap();
    let model = cnn();
    let model = path_arg(&model);
    kiln_fails(&["run", model, "--shapes", "img:1x3x32x32"], "`img` is not an input of the model (inputs: image)");
    kiln_fails(&["run", model, "--shapes", "image:1x4x32x32"], "axis 1 is fixed at 3");
    kiln_fails(&["run", model, "--shapes", "image:1x3x32"], "rank 4");
    kiln_fails(&["run", model, "--shapes", "image:2xthree"], "numbers joined by `x`");
    let input = dir.path().join("in.npz");
    write_npz_array(&input, "image", &[1, 3, 32, 32], &vec![0.5f32; 3 * 32 * 32]);
    kiln_fails(
        &["run", model, "--inputs", path_arg(&input), "--shapes", "image:2x3x32x32"],
        "--shapes gives input `image` dims 2x3x32x32 but",
    );
    let stdout = kiln_ok(&["run", model, "--inputs", path_arg(&input), "--shapes", "image:1x3x32x32"]);
    assert!(stdout.contains("`probs`: f32[1,"), "{stdout}");
}

#[test]
fn build_records_a_profile_that_runs_check_against() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("cnn.engine");
    let model = cnn();
    let stdout = kiln_ok(&[
        "build",
        path_arg(&model),
        "-o",
        path_arg(&engine),
        "--backend",
        "cpu",
        "--min-shapes",
        "image:1x3x32x32",
        "--opt-shapes",
        "image:2x3x32x32",
        "--max-shapes",
        "image:4x3x32x32",
    ]);
    assert!(stdout.contains("activations:"), "{stdout}");
    assert!(stdout.contains("1 profile(s): image 1x3x32x32..4x3x32x32"), "{stdout}");
    assert!(stdout.contains("weights:"), "{stdout}");
    let engine = path_arg(&engine);
    // Random inputs take the profile's opt dims.
    let stdout = kiln_ok(&["run", engine]);
    assert!(stdout.contains("`image`: f32[2,3,32,32]"), "{stdout}");
    for batch in [1, 4] {
        let stdout = kiln_ok(&["run", engine, "--shapes", &format!("image:{batch}x3x32x32")]);
        assert!(stdout.contains(&format!("`probs`: f32[{batch},")), "{stdout}");
    }
    kiln_fails(
        &["run", engine, "--shapes", "image:5x3x32x32"],
        "axis 0 is 5, outside [1, 4] of optimization profile 0",
    );
}

#[test]
fn build_shape_options_are_checked() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("cnn.engine");
    let model = cnn();
    let (model, engine) = (path_arg(&model), path_arg(&engine));
    kiln_fails(&["build", model, "-o", engine, "--min-shapes", "image:1x3x32x32"], "go together");
    kiln_fails(
        &["build", model, "-o", engine, "--min-shapes", "image:4x3x32x32", "--max-shapes", "image:2x3x32x32"],
        "min 4 ≤ opt 2 ≤ max 2 does not hold",
    );
    kiln_fails(
        &["build", model, "-o", engine, "--min-shapes", "image:1x3x32x32", "--max-shapes", "image:2x3x32x33"],
        "axis 3 is fixed at 32",
    );
    // A dynamic model without a profile still builds; the summary says what is unbounded.
    let stdout = kiln_ok(&["build", model, "-o", engine, "--backend", "cpu"]);
    assert!(stdout.contains("dynamically sized tensors"), "{stdout}");
}
