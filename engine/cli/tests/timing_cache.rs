//! `kiln build --timing-cache` and `kiln cache`: rebuilding with a grown cache times
//! nothing and writes a byte-identical engine; the cache can be shown, edited and merged.

mod common;

use common::*;
use tempfile::TempDir;

const SHAPES: [&str; 6] =
    ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:2x3x32x32"];

#[test]
fn building_twice_with_a_timing_cache_gives_identical_engines() {
    let dir = TempDir::new().unwrap();
    let model = repo_path("tests/data/pytorch/cnn_torchscript.onnx");
    let (a, b, cache) = (dir.path().join("a.engine"), dir.path().join("b.engine"), dir.path().join("c.bin"));
    let build = |out: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["build", model.to_str().unwrap(), "-o", path_arg(out), "--backend", "cpu", "--timing-cache", path_arg(&cache)];
        args.extend(SHAPES);
        args.extend(extra);
        kiln_ok(&args)
    };
    let first = build(&a, &[]);
    assert!(!first.contains("tactics:  0 layer signatures timed"), "{first}");
    let second = build(&b, &["--error-on-timing-cache-miss"]);
    assert!(second.contains("tactics:  0 layer signatures timed"), "{second}");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let shown = kiln_ok(&["cache", "show", path_arg(&cache)]);
    assert!(shown.contains("chosen: cpu/conv_im2col_gemm@") || shown.contains("chosen: cpu/conv_direct@"), "{shown}");
    let key = shown.lines().find(|l| l.starts_with("Fused:") || l.starts_with("Convolution:")).unwrap().to_string();
    let edited = kiln_ok(&["cache", "edit", path_arg(&cache), &key, "conv_direct"]);
    assert!(edited.contains("cpu/conv_direct@"), "{edited}");
    let merged = dir.path().join("m.bin");
    kiln_ok(&["cache", "merge", path_arg(&cache), path_arg(&cache), "-o", path_arg(&merged)]);
    let shown = kiln_ok(&["cache", "show", path_arg(&merged)]);
    let after_key = shown.lines().skip_while(|l| *l != key).nth(1).unwrap();
    assert!(after_key.contains("chosen: cpu/conv_direct@"), "{shown}");
}
