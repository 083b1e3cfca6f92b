//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code)] // each test file uses its own subset

pub mod conv_bn;

use npyz::npz::{NpzArchive, NpzWriter};
use npyz::{AutoSerialize, WriterBuilder};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A path inside the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

/// Runs kiln with the log filter of its flags alone (RUST_LOG from the test's
/// environment removed).
pub fn kiln(args: &[&str]) -> Output {
    kiln_env(args, &[])
}

/// Runs kiln with extra environment variables (RUST_LOG only when given).
pub fn kiln_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command.args(args).env_remove("RUST_LOG");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("start kiln")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn path_arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Runs kiln expecting success; returns stdout.
pub fn kiln_ok(args: &[&str]) -> String {
    let out = kiln(args);
    assert!(out.status.success(), "kiln {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs kiln expecting failure with exactly one `error:` line on stderr that mentions
/// `keyword`; returns that line.
pub fn kiln_fails(args: &[&str], keyword: &str) -> String {
    let out = kiln(args);
    let line = one_error_line(&out, &format!("kiln {args:?}"));
    assert!(!line.contains("panicked"), "kiln {args:?} panicked: {line}");
    assert!(line.contains(keyword), "kiln {args:?}: `{keyword}` not in: {line}");
    line
}

/// Checks a failed run: an exit status other than 0 and 101 (not a signal), and exactly one
/// stderr line, an `error:` one; returns it.
pub fn one_error_line(out: &Output, what: &str) -> String {
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{what} succeeded; stdout: {}", text(&out.stdout));
    assert!(out.status.code().is_some(), "{what} was killed by a signal ({:?}): {stderr}", out.status);
    assert_ne!(out.status.code(), Some(101), "{what} panicked: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what} must print one stderr line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{what}: {stderr}");
    lines[0].to_string()
}

pub fn write_npz_array<T: AutoSerialize + Copy>(path: &Path, name: &str, shape: &[u64], values: &[T]) {
    let mut npz = NpzWriter::create(path).expect("create npz");
    let mut writer = npz
        .array::<T>(name, Default::default())
        .expect("start array")
        .default_dtype()
        .shape(shape)
        .begin_nd()
        .expect("begin array");
    writer.extend(values.iter().copied()).expect("write array");
    writer.finish().expect("finish array");
    npz.zip_writer().finish().expect("finish npz");
}

/// Reads every f32 array of an npz file as (name, shape, values).
pub fn read_f32_arrays(path: &Path) -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let mut npz = NpzArchive::open(path).expect("open npz");
    let names: Vec<String> = npz.array_names().map(str::to_string).collect();
    names
        .into_iter()
        .map(|name| {
            let array = npz.by_name(&name).expect("read array").expect("listed array");
            let shape = array.shape().to_vec();
            (name, shape, array.into_vec::<f32>().expect("f32 array"))
        })
        .collect()
}

/// Element-wise closeness, relative above magnitude 1 and absolute below it.
pub fn assert_close(got: &[f32], want: &[f32], tolerance: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tolerance * w.abs().max(1.0), "element {i}: got {g}, want {w}");
    }
}
