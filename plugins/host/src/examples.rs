//! Builds the example plugins that ship in `plugins/examples/` (feature `example-builds`):
//! the C one with the system C compiler, the Rust one with cargo, as a plugin author
//! would. kiln's tests use these to load real libraries.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (this crate lives in `plugins/host`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles a C plugin source as strict C99 into `out_dir/lib{name}.so` with extra flags.
pub fn build_c_plugin(name: &str, source: &Path, out_dir: &Path, flags: &[&str]) -> Result<PathBuf, String> {
    let out = out_dir.join(format!("lib{name}.{}", std::env::consts::DLL_EXTENSION));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&cc)
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O2"])
        .arg(format!("-I{}", repo_root().join("plugins/abi/include").display()))
        .args(flags)
        .arg(source)
        .arg("-o")
        .arg(&out)
        .output()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
    if !output.status.success() {
        return Err(format!("compiling {} failed: {}", source.display(), String::from_utf8_lossy(&output.stderr)));
    }
    Ok(out)
}

/// The C example (`plugins/examples/c-clip/clip.c`) built into `out_dir`.
pub fn build_clip_example(name: &str, out_dir: &Path, flags: &[&str]) -> Result<PathBuf, String> {
    build_c_plugin(name, &repo_root().join("plugins/examples/c-clip/clip.c"), out_dir, flags)
}

/// The Rust example (`plugins/examples/rust-swish`) built by cargo into `target_dir`.
pub fn build_swish_example(cargo: &str, target_dir: &Path) -> Result<PathBuf, String> {
    let output = Command::new(cargo)
        .args(["build", "--quiet", "-p", "kiln-example-swish", "--target-dir"])
        .arg(target_dir)
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("building kiln-example-swish failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(target_dir.join("debug").join(format!("libkiln_example_swish.{}", std::env::consts::DLL_EXTENSION)))
}

/// A backend plugin crate (`kiln-backend-wgpu`, `kiln-backend-cuda`) built by cargo into
/// `target_dir`: the path of its `libkiln_backend_<name>` library.
pub fn build_backend_plugin(cargo: &str, name: &str, target_dir: &Path) -> Result<PathBuf, String> {
    let output = Command::new(cargo)
        .args(["build", "--quiet", "-p", &format!("kiln-backend-{name}"), "--target-dir"])
        .arg(target_dir)
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("building kiln-backend-{name} failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(target_dir.join("debug").join(format!("libkiln_backend_{name}.{}", std::env::consts::DLL_EXTENSION)))
}
