//! `kiln_plugin.h` compiles as strict C99, and every struct the Rust mirror declares has
//! the header's size and field offsets (a C program prints them; Rust compares).

use kiln_plugin_abi::*;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn include_dir() -> String {
    format!("-I{}", Path::new(env!("CARGO_MANIFEST_DIR")).join("include").display())
}

#[test]
fn the_header_compiles_as_strict_c99() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("use_header.c");
    std::fs::write(&source, "#include \"kiln_plugin.h\"\nint main(void) { kiln_error e = {0, 0}; return kiln_set_error(&e, \"%d\", 1) == KILN_ERROR ? 0 : 1; }\n").unwrap();
    let out = Command::new(cc())
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", &include_dir()])
        .arg(&source)
        .output()
        .expect("the C compiler runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// (C expression, Rust value) pairs: sizes and offsets of every shared struct.
fn layout() -> Vec<(&'static str, usize)> {
    macro_rules! size {
        ($t:ident) => {
            (concat!("sizeof(", stringify!($t), ")"), size_of::<$t>())
        };
    }
    macro_rules! at {
        ($t:ident, $c:literal, $r:ident) => {
            (concat!("offsetof(", stringify!($t), ", ", $c, ")"), offset_of!($t, $r))
        };
    }
    vec![
        size!(kiln_error),
        size!(kiln_field),
        at!(kiln_field, "data", data),
        size!(kiln_field_spec),
        size!(kiln_tensor_desc),
        at!(kiln_tensor_desc, "dims", dims),
        size!(kiln_dim_expr),
        at!(kiln_dim_expr, "value", value),
        size!(kiln_shape_exprs),
        at!(kiln_shape_exprs, "nodes", nodes),
        at!(kiln_shape_exprs, "output_dims", output_dims),
        size!(kiln_wgsl_kernel),
        size!(kiln_cuda_kernel),
        at!(kiln_cuda_kernel, "entry_point", entry_point),
        at!(kiln_cuda_kernel, "shared_memory_bytes", shared_memory_bytes),
        size!(kiln_field_sink),
        size!(kiln_plugin),
        at!(kiln_plugin, "self", self_),
        at!(kiln_plugin, "serialize", serialize),
        at!(kiln_plugin, "enqueue_cpu", enqueue_cpu),
        at!(kiln_plugin, "enqueue_cuda", enqueue_cuda),
        at!(kiln_plugin, "destroy", destroy),
        size!(kiln_plugin_creator),
        at!(kiln_plugin_creator, "self", self_),
        at!(kiln_plugin_creator, "create", create),
        size!(kiln_plugin_library),
        at!(kiln_plugin_library, "creators", creators),
    ]
}

#[test]
fn the_rust_mirror_matches_the_header_layout() {
    let dir = tempfile::tempdir().unwrap();
    let entries = layout();
    let prints: String = entries.iter().map(|(expr, _)| format!("  printf(\"%zu\\n\", (size_t){expr});\n")).collect();
    let source = dir.path().join("layout.c");
    std::fs::write(&source, format!("#include <stddef.h>\n#include <stdio.h>\n#include \"kiln_plugin.h\"\nint main(void) {{\n{prints}  return 0;\n}}\n"))
        .unwrap();
    let exe = dir.path().join("layout");
    let built =
        Command::new(cc()).args(["-std=c99", &include_dir()]).arg(&source).arg("-o").arg(&exe).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let out = Command::new(&exe).output().unwrap();
    let c_values: Vec<usize> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(c_values.len(), entries.len());
    for ((expr, rust), c) in entries.iter().zip(c_values) {
        assert_eq!(*rust, c, "{expr}: Rust says {rust}, C says {c}");
    }
    assert_eq!(KILN_PLUGIN_ABI_VERSION, 1);
    assert!(HEADER.contains("#define KILN_PLUGIN_ABI_VERSION 1u"));
}
