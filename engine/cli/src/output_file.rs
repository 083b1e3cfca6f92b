//! Every file a command writes goes through here: an output may not be one of the
//! command's inputs (the same file, however it is named), and a regular file is written to
//! a temporary beside it and renamed over it, so a failed write leaves the old file whole.

use anyhow::{bail, Context};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a command uses a file it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Reads,
    Writes,
    /// Read, then written back (a timing cache the build grows).
    Updates,
}

/// One file a command names: its role in messages (`the model`, `--save-outputs`).
#[derive(Debug)]
pub struct NamedFile<'a> {
    pub role: &'a str,
    pub path: &'a Path,
    pub usage: Use,
}

impl<'a> NamedFile<'a> {
    pub fn reads(role: &'a str, path: &'a Path) -> Self {
        NamedFile { role, path, usage: Use::Reads }
    }

    pub fn writes(role: &'a str, path: &'a Path) -> Self {
        NamedFile { role, path, usage: Use::Writes }
    }

    pub fn updates(role: &'a str, path: &'a Path) -> Self {
        NamedFile { role, path, usage: Use::Updates }
    }
}

/// Refuses a command whose output is one of its inputs or another of its outputs: the same
/// file by identity (device and inode on unix), so hard links and symlinks count.
pub fn check_distinct(files: &[NamedFile<'_>]) -> anyhow::Result<()> {
    for (i, out) in files.iter().enumerate().filter(|(_, f)| f.usage != Use::Reads) {
        for (j, other) in files.iter().enumerate() {
            // Each pair of outputs once (j < i); every output against every input.
            if i != j && (other.usage != Use::Writes || j < i) && same_file(out.path, other.path) {
                let what = if other.usage == Use::Writes { "another output" } else { "an input of this command" };
                bail!(
                    "{} `{}` is the same file as {} `{}` ({what}): kiln never writes over its inputs; choose another path",
                    out.role,
                    out.path.display(),
                    other.role,
                    other.path.display()
                );
            }
        }
    }
    Ok(())
}

/// Whether two paths name one file: by identity when both exist, else by their absolute
/// paths with the existing folders resolved (an output not created yet).
fn same_file(a: &Path, b: &Path) -> bool {
    match (identity(a), identity(b)) {
        (Some(a), Some(b)) => a == b,
        (None, None) => resolved(a).is_some_and(|a| Some(a) == resolved(b)),
        _ => false,
    }
}

#[cfg(unix)]
type FileIdentity = (u64, u64);
#[cfg(not(unix))]
type FileIdentity = PathBuf;

#[cfg(unix)]
fn identity(path: &Path) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(path: &Path) -> Option<FileIdentity> {
    std::fs::canonicalize(path).ok()
}

/// `path` made absolute through its existing parent folder.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Whether `path` is `-`: standard output, for `--json -`.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}


/// Writes `bytes` to `path` (see the module docs).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_with(path, |file| Ok(file.write_all(bytes)?))
}

/// Writes `path` with `write`: a regular file (or a new one) through a temporary beside it
/// that replaces it only once complete; a device or pipe (`/dev/null`) directly.
pub fn write_with(path: &Path, write: impl FnOnce(&mut File) -> anyhow::Result<()>) -> anyhow::Result<()> {
    // Write through a symlink to the file it names, as a plain write would.
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if std::fs::metadata(&target).is_ok_and(|m| !m.is_file()) {
        let mut file = File::options().write(true).open(&target)?;
        write(&mut file)?;
        return Ok(file.flush()?);
    }
    let (temp_path, mut temp) = temporary_beside(&target)?;
    if let Ok(old) = std::fs::metadata(&target) {
        let _ = temp.set_permissions(old.permissions());
    }
    let written = write(&mut temp).and_then(|()| Ok(temp.sync_all()?));
    drop(temp);
    let renamed = written.and_then(|()| std::fs::rename(&temp_path, &target).map_err(anyhow::Error::from));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temp_path);
    }
    renamed
}

/// A new file in `target`'s folder, named after it (`.NAME.PID.N.tmp`).
fn temporary_beside(target: &Path) -> anyhow::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().with_context(|| format!("`{}` names no file", target.display()))?;
    let folder = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = folder.join(format!(".{}.{}.{n}.tmp", name.to_string_lossy(), std::process::id()));
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .with_context(|| format!("cannot create a temporary file in `{}`", folder.display()))?;
    Ok((temp, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hard_link_or_symlink_to_an_input_is_the_same_file() {
        let dir = tempfile::TempDir::new().unwrap();
        let (model, hard, soft) = (dir.path().join("m.onnx"), dir.path().join("hard"), dir.path().join("soft"));
        std::fs::write(&model, b"model").unwrap();
        std::fs::hard_link(&model, &hard).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&model, &soft).unwrap();
        for alias in [&model, &hard, &soft] {
            let files = [NamedFile::reads("the model", &model), NamedFile::writes("--output", alias)];
            let error = check_distinct(&files).unwrap_err().to_string();
            assert!(error.contains("is the same file as the model"), "{error}");
        }
        let fresh = dir.path().join("sub/../e.engine");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let files = [NamedFile::reads("the model", &model), NamedFile::writes("--output", &fresh)];
        check_distinct(&files).unwrap();
        // An output not there yet still may not be named twice.
        let plain = dir.path().join("e.engine");
        let twice = [NamedFile::writes("--json", &fresh), NamedFile::writes("--export-profile", &plain)];
        assert!(check_distinct(&twice).unwrap_err().to_string().contains("another output"));
        // A file both read and written back is not its own input.
        check_distinct(&[NamedFile::updates("--timing-cache", &model)]).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("out.json");
        std::fs::write(&path, b"old").unwrap();
        let error = write_with(&path, |f| {
            f.write_all(b"half")?;
            bail!("disk on fire")
        });
        assert!(error.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write_bytes(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
