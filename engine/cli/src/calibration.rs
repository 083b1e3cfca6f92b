//! `kiln build --flag int8`'s ranges: a calibration cache read back (`--calib-cache FILE`
//! that exists), or a calibration over a folder of npz files (`--calib DIR`, one file per
//! batch, arrays named as the network's inputs), written to the cache file when one is named.

use crate::backends::SelectedBackend;
use crate::{npz, output_file};
use anyhow::{bail, Context};
use kiln::calibrate;
use kiln::quant::{CalibrationData, CalibrationMethod, CalibrationTable};
use kiln::{HostTensor, Network, OptimizationProfile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What the build command was given for INT8.
pub struct CalibrationArgs<'a> {
    pub data: Option<&'a Path>,
    pub cache: Option<&'a Path>,
    pub method: CalibrationMethod,
}

/// The calibration table for an INT8 build: read from the cache, or measured (and cached);
/// None when neither is given (only ranges set on the network count then).
pub fn table(args: &CalibrationArgs, network: &Network, backend: &SelectedBackend, profiles: &[OptimizationProfile]) -> anyhow::Result<Option<CalibrationTable>> {
    if let Some(cache) = args.cache.filter(|c| c.exists()) {
        let text = std::fs::read_to_string(cache).with_context(|| format!("cannot read calibration cache `{}`", cache.display()))?;
        let table = CalibrationTable::from_cache_text(&text).with_context(|| format!("`{}`", cache.display()))?;
        tracing::info!(target: "kiln::int8", "read calibration cache `{}`: {} tensors ({}); calibration skipped", cache.display(), table.amax.len(), table.method);
        return Ok(Some(table));
    }
    let Some(dir) = args.data else {
        if let Some(cache) = args.cache {
            bail!("calibration cache `{}` does not exist; give --calib DIR to make it", cache.display());
        }
        tracing::warn!(target: "kiln::int8", "--flag int8 without --calib or --calib-cache: only ranges set on the network quantize layers");
        return Ok(None);
    };
    let set = NpzFolder::open(dir)?;
    let spinner = crate::progress::spinner(format!("calibrating ({}) over {} batches of `{}`", args.method, set.files.len(), dir.display()));
    let table = calibrate(network, backend.backend.as_ref(), profiles, &set, args.method)?;
    drop(spinner);
    tracing::info!(target: "kiln::int8", "calibrated {} tensors ({}) over {} batches", table.amax.len(), table.method, set.files.len());
    if let Some(cache) = args.cache {
        output_file::write_bytes(cache, table.to_cache_text()?.as_bytes()).with_context(|| format!("cannot write calibration cache `{}`", cache.display()))?;
    }
    Ok(Some(table))
}

/// The npz files of a folder, in name order, each one batch.
struct NpzFolder {
    files: Vec<PathBuf>,
}

impl NpzFolder {
    fn open(dir: &Path) -> anyhow::Result<NpzFolder> {
        let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read calibration folder `{}`", dir.display()))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "npz") {
                files.push(path);
            }
        }
        files.sort();
        if files.is_empty() {
            bail!("calibration folder `{}` holds no .npz files (one per batch, arrays named as the network's inputs)", dir.display());
        }
        Ok(NpzFolder { files })
    }
}

impl CalibrationData for NpzFolder {
    fn len(&self) -> usize {
        self.files.len()
    }

    fn batch(&self, index: usize) -> Result<HashMap<String, HostTensor>, String> {
        let path = &self.files[index];
        let arrays = npz::read_npz(path).map_err(|e| format!("`{}`: {e:#}", path.display()))?;
        Ok(arrays.into_iter().collect())
    }
}
