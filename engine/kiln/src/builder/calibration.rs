//! Calibration for INT8 (seed §6.5.3): build the network in f32 with every tensor INT8 would
//! quantize ([`crate::quant::implicit::quantized_activations`]) marked as an output, run it
//! over the calibration set, and keep the range each method picks. Magnitudes are read twice
//! (largest first, then a histogram over it) unless min-max needs only the first pass.

use crate::backend::Backend;
use crate::builder::Builder;
use crate::config::{BuilderConfig, BuilderFlags};
use crate::ir::network::Network;
use crate::ir::tensor::HostTensor;
use crate::profile::OptimizationProfile;
use crate::quant::calibrate::{add_to_histogram, chosen_amax, CalibrationData, CalibrationMethod, BINS};
use crate::quant::implicit::quantized_activations;
use crate::quant::{CalibrationError, CalibrationTable};
use crate::runtime::ExecutionContext;
use std::collections::BTreeMap;

/// Measures the range of every tensor INT8 would quantize by running `network` in f32 on
/// `backend` over `data` (`profiles` for networks with dynamic inputs).
pub fn calibrate(
    network: &Network,
    backend: &dyn Backend,
    profiles: &[OptimizationProfile],
    data: &dyn CalibrationData,
    method: CalibrationMethod,
) -> Result<CalibrationTable, CalibrationError> {
    if data.is_empty() {
        return Err(CalibrationError::Run("the calibration set is empty".into()));
    }
    let targets = quantized_activations(network);
    let mut probed = network.clone();
    for &t in &targets {
        probed.mark_output(t).map_err(|e| CalibrationError::Run(e.to_string()))?;
    }
    let config = BuilderConfig { profiles: profiles.to_vec(), builder_flags: BuilderFlags::empty(), ..BuilderConfig::default() };
    let engine = Builder::new(backend).build(&probed, &config).map_err(|e| CalibrationError::Run(format!("cannot build the f32 network to calibrate on: {e}")))?;
    let context = ExecutionContext::new(engine, backend).map_err(|e| CalibrationError::Run(e.to_string()))?;
    let names: Vec<String> = targets.iter().map(|&t| network.tensor(t).name.clone()).collect();
    let run = |i: usize| -> Result<BTreeMap<String, HostTensor>, CalibrationError> {
        let batch = data.batch(i).map_err(|e| CalibrationError::Run(format!("calibration batch {i}: {e}")))?;
        context.run(&batch).map_err(|e| CalibrationError::Run(format!("calibration batch {i}: {e}")))
    };
    let magnitudes = |outputs: &BTreeMap<String, HostTensor>, name: &str| -> Result<Vec<f64>, CalibrationError> {
        let t = outputs.get(name).ok_or_else(|| CalibrationError::Run(format!("the run gave no tensor `{name}`")))?;
        Ok(t.to_f64_vec().into_iter().map(f64::abs).filter(|v| v.is_finite()).collect())
    };
    let mut amax = vec![0f64; names.len()];
    for i in 0..data.len() {
        let outputs = run(i)?;
        for (k, name) in names.iter().enumerate() {
            amax[k] = magnitudes(&outputs, name)?.into_iter().fold(amax[k], f64::max);
        }
    }
    let mut table = CalibrationTable { method: method.to_string(), amax: BTreeMap::new() };
    if method == CalibrationMethod::MinMax {
        table.amax = names.into_iter().zip(amax).map(|(n, a)| (n, a as f32)).collect();
        return Ok(table);
    }
    let mut histograms = vec![vec![0u64; BINS]; names.len()];
    for i in 0..data.len() {
        let outputs = run(i)?;
        for (k, name) in names.iter().enumerate() {
            add_to_histogram(&mut histograms[k], amax[k], &magnitudes(&outputs, name)?);
        }
    }
    for (k, name) in names.into_iter().enumerate() {
        table.amax.insert(name, chosen_amax(method, &histograms[k], amax[k]));
    }
    Ok(table)
}
