//! Timing the MatrixMultiply kernel on the shared device: GPU timestamps around each
//! dispatch where the adapter has TIMESTAMP_QUERY, wall-clock per submission otherwise.

use crate::device::{self, DeviceError};
use crate::wgsl::Storage;
use crate::gemm::{Accumulate, GemmKernel, GemmStorage};
use crate::shaders::Instance;
use crate::value::Recorder;

/// The median of `reps` timed runs of one `m×k · k×n` f32 product.
#[derive(Clone, Debug)]
pub struct MatmulTiming {
    pub median_ms: f64,
    pub tflops: f64,
    /// "timestamp" or "wall-clock".
    pub timer: &'static str,
}

/// Times an f32 matmul kernel on `m×k · k×n` (inputs filled with small values): the
/// 128×128-tile kernel when `wide`, else the 64×64 one.
pub fn time_matmul(m: u32, n: u32, k: u32, reps: usize, wide: bool) -> Result<MatmulTiming, DeviceError> {
    let gpu = device::shared()?;
    let fill = |len: usize| (0..len).map(|i| ((i % 7) as f32 * 0.25).to_bits()).collect::<Vec<u32>>();
    let a = gpu.storage_init("bench A", &fill(m as usize * k as usize))?;
    let b = gpu.storage_init("bench B", &fill(k as usize * n as usize))?;
    let c = gpu.storage("bench C", u64::from(m) * u64::from(n) * 4)?;
    let params = gpu.storage_init("bench params", &[m, n, k, 1, k, 1, n, 1, 0, 0])?;
    let (kernel, tile) =
        if wide { (Instance::plain("matmul_wide"), 128) } else { (Instance::matmul(Storage::F32), 64) };
    let pipeline = gpu.pipeline(&kernel.key, || kernel.source())?;
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = [&params, &a, &b, &c]
        .iter()
        .enumerate()
        .map(|(i, buf)| wgpu::BindGroupEntry { binding: i as u32, resource: buf.as_entire_binding() })
        .collect();
    let bind_group =
        gpu.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries });
    let groups = [n.div_ceil(tile), m.div_ceil(tile), 1];
    let (times, timer) = timed_runs(gpu, &pipeline, &bind_group, groups, reps)?;
    let flops = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
    Ok(MatmulTiming::of(times, flops, timer))
}

impl MatmulTiming {
    fn of(mut times: Vec<f64>, flops: f64, timer: &'static str) -> MatmulTiming {
        times.sort_by(f64::total_cmp);
        let median_ms = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
        MatmulTiming { median_ms, tflops: flops / (median_ms * 1e-3) / 1e12, timer }
    }
}

/// Milliseconds of each of `reps` runs of one dispatch (after one warm-up run): GPU
/// timestamps around the pass where the adapter has TIMESTAMP_QUERY, else wall-clock
/// per submission (which then includes submission and the wait).
fn timed_runs(
    gpu: &crate::device::Gpu,
    pipeline: &wgpu::ComputePipeline,
    bind_group: &wgpu::BindGroup,
    groups: [u32; 3],
    reps: usize,
) -> Result<(Vec<f64>, &'static str), DeviceError> {
    let timestamps = gpu.features.contains(wgpu::Features::TIMESTAMP_QUERY);
    let query = timestamps.then(|| {
        gpu.device.create_query_set(&wgpu::QuerySetDescriptor { label: None, ty: wgpu::QueryType::Timestamp, count: 2 })
    });
    let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let results = gpu.storage("bench timestamps", 16)?;
    let mut times = Vec::with_capacity(reps);
    // One warm-up run, then the timed ones.
    for rep in 0..=reps {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        {
            let timestamp_writes = query.as_ref().map(|q| wgpu::ComputePassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, bind_group, &[]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        }
        if let Some(q) = &query {
            encoder.resolve_query_set(q, 0..2, &resolve, 0);
            encoder.copy_buffer_to_buffer(&resolve, 0, &results, 0, 16);
        }
        let start = std::time::Instant::now();
        let words = gpu.read_words(Some(encoder), &results, 4)?;
        let wall = start.elapsed().as_secs_f64() * 1e3;
        let ms = if timestamps {
            let begin = u64::from(words[0]) | (u64::from(words[1]) << 32);
            let end = u64::from(words[2]) | (u64::from(words[3]) << 32);
            end.saturating_sub(begin) as f64 * f64::from(gpu.queue.get_timestamp_period()) / 1e6
        } else {
            wall
        };
        if rep > 0 {
            times.push(ms);
        }
    }
    Ok((times, if timestamps { "timestamp" } else { "wall-clock" }))
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("the adapter `{adapter}` has no SHADER_F16: the f16 kernel cannot run")]
    NoF16 { adapter: String },
    #[error("kernel variant {0:?} is not well formed")]
    BadKernel(GemmKernel),
    #[error("the {m}×{k}·{k}×{n} product does not fit the vec4 kernel (K and N must be multiples of 4)")]
    BadShape { m: u32, n: u32, k: u32 },
}

/// A timed and checked run of a [`GemmKernel`].
#[derive(Clone, Debug)]
pub struct GemmRun {
    pub timing: MatmulTiming,
    /// ‖C − C_ref‖ / ‖C_ref‖ over sampled elements (f64 reference on the host, from the
    /// same rounded inputs); NaN when an element was left unwritten (C starts as NaN).
    pub rel_error: f64,
    /// Elements compared.
    pub checked: usize,
}

/// [`kiln::plan::timing::uniform`] values from `seed`.
fn random_values(len: usize, seed: u64) -> Vec<f32> {
    kiln::plan::timing::uniform(len, &mut (seed | 1))
}

/// Device words of `values` in `storage` (f16: two halves per word, low half first), and
/// the values as the device sees them (rounded).
fn pack(values: &[f32], storage: GemmStorage) -> (Vec<u32>, Vec<f32>) {
    match storage {
        GemmStorage::F32 => (values.iter().map(|x| x.to_bits()).collect(), values.to_vec()),
        GemmStorage::F16 => {
            let halves: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
            let words = halves
                .chunks(2)
                .map(|p| u32::from(p[0].to_bits()) | (u32::from(p.get(1).map_or(0, |h| h.to_bits())) << 16))
                .collect();
            (words, halves.iter().map(|h| h.to_f32()).collect())
        }
    }
}

fn unpack(words: &[u32], storage: GemmStorage, len: usize) -> Vec<f32> {
    match storage {
        GemmStorage::F32 => words.iter().map(|&w| f32::from_bits(w)).collect(),
        GemmStorage::F16 => words
            .iter()
            .flat_map(|&w| [half::f16::from_bits(w as u16), half::f16::from_bits((w >> 16) as u16)])
            .map(|h| h.to_f32())
            .take(len)
            .collect(),
    }
}

/// Times `kernel` on a row-major `m×k · k×n` product of random values (median of `reps`
/// after a warm-up, GPU timestamps) and checks sampled elements of C (every row and
/// column edge among them) against an f64 host reference.
pub fn time_gemm(m: u32, n: u32, k: u32, reps: usize, kernel: GemmKernel) -> Result<GemmRun, BenchError> {
    let gpu = device::shared()?;
    if !kernel.is_valid() {
        return Err(BenchError::BadKernel(kernel));
    }
    if k % 4 != 0 || n % 4 != 0 {
        return Err(BenchError::BadShape { m, n, k });
    }
    let f16 = kernel.storage == GemmStorage::F16 || kernel.accumulate == Accumulate::F16;
    if f16 && !gpu.features.contains(wgpu::Features::SHADER_F16) {
        return Err(BenchError::NoF16 { adapter: gpu.info.name.clone() });
    }
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let (a_words, a_vals) = pack(&random_values(mu * ku, 0x9e37_79b9_7f4a_7c15), kernel.storage);
    let (b_words, b_vals) = pack(&random_values(ku * nu, 0xd1b5_4a32_d192_ed03), kernel.storage);
    let c_words = match kernel.storage {
        GemmStorage::F32 => mu * nu,
        GemmStorage::F16 => (mu * nu).div_ceil(2),
    };
    let a = gpu.storage_init("gemm bench A", &a_words)?;
    let b = gpu.storage_init("gemm bench B", &b_words)?;
    // Poisoned with NaN (f32 and both f16 halves) so an unwritten element fails the check.
    let c = gpu.storage_init("gemm bench C", &vec![u32::MAX; c_words])?;
    let params = gpu.storage_init("gemm bench params", &[m, n, k, 1, k, 1, n, 1, 0, 0])?;
    let pipeline = gpu.pipeline_trusted(&kernel.name(), || kernel.source())?;
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = [&params, &a, &b, &c]
        .iter()
        .enumerate()
        .map(|(i, buf)| wgpu::BindGroupEntry { binding: i as u32, resource: buf.as_entire_binding() })
        .collect();
    let bind_group = gpu.scoped("binding the gemm bench buffers", || {
        gpu.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries })
    })?;
    let (times, timer) = timed_runs(gpu, &pipeline, &bind_group, kernel.groups(m, n, 1), reps)?;
    let flops = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
    let out = unpack(&gpu.read_words(None, &c, c_words)?, kernel.storage, mu * nu);
    let mut rows: Vec<usize> = vec![0, mu - 1];
    let mut cols: Vec<usize> = vec![0, nu - 1];
    let picks = random_values(64, 0x1234_5678);
    rows.extend(picks[..32].iter().map(|x| ((x + 1.0) * 0.5 * mu as f32) as usize % mu));
    cols.extend(picks[32..].iter().map(|x| ((x + 1.0) * 0.5 * nu as f32) as usize % nu));
    let (mut diff, mut norm, mut checked) = (0.0f64, 0.0f64, 0);
    for (&r, &col) in rows.iter().zip(&cols) {
        let want: f64 = (0..ku).map(|i| f64::from(a_vals[r * ku + i]) * f64::from(b_vals[i * nu + col])).sum();
        let got = f64::from(out[r * nu + col]);
        diff += (got - want) * (got - want);
        norm += want * want;
        checked += 1;
    }
    // A whole row and a whole column too, so a mis-indexed tile edge cannot hide.
    for col in 0..nu {
        let r = mu / 2;
        let want: f64 = (0..ku).map(|i| f64::from(a_vals[r * ku + i]) * f64::from(b_vals[i * nu + col])).sum();
        let got = f64::from(out[r * nu + col]);
        diff += (got - want) * (got - want);
        norm += want * want;
        checked += 1;
    }
    for r in 0..mu {
        let col = nu - 1 - nu / 3;
        let want: f64 = (0..ku).map(|i| f64::from(a_vals[r * ku + i]) * f64::from(b_vals[i * nu + col])).sum();
        let got = f64::from(out[r * nu + col]);
        diff += (got - want) * (got - want);
        norm += want * want;
        checked += 1;
    }
    let rel_error = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
    Ok(GemmRun { timing: MatmulTiming::of(times, flops, timer), rel_error, checked })
}

/// What one dispatch costs beyond its work.
#[derive(Clone, Debug)]
pub struct DispatchOverhead {
    /// Wall-clock microseconds per empty dispatch recorded straight into one encoder (one
    /// compute pass each, as kiln records them), one submission and wait for all.
    pub raw_us: f64,
    /// The same through kiln's recorder (`Recorder::dispatch`: a parameter buffer and a
    /// bind group per dispatch, error scopes around each).
    pub recorder_us: f64,
    /// GPU microseconds per empty dispatch (timestamps around the whole encoder), where the
    /// adapter has TIMESTAMP_QUERY.
    pub gpu_us: Option<f64>,
}

const EMPTY_KERNEL: &str = "@compute @workgroup_size(256)\nfn main() {\n    _ = params[0];\n}\n";

/// Times `count` empty dispatches (one workgroup each) both ways (median of 5 batches).
pub fn dispatch_overhead(count: usize) -> Result<DispatchOverhead, DeviceError> {
    let count = count.max(2);
    let gpu = device::shared()?;
    let kernel = Instance { key: "bench/empty".into(), body: EMPTY_KERNEL, prelude: String::new() };
    let pipeline = gpu.pipeline(&kernel.key, || kernel.source())?;
    let params = gpu.storage_init("empty params", &[1])?;
    let layout = pipeline.get_bind_group_layout(0);
    let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() }],
    });
    let timestamps = gpu.features.contains(wgpu::Features::TIMESTAMP_QUERY);
    let query = timestamps.then(|| {
        gpu.device.create_query_set(&wgpu::QuerySetDescriptor { label: None, ty: wgpu::QueryType::Timestamp, count: 2 })
    });
    let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let results = gpu.storage("empty timestamps", 16)?;
    let (mut raw, mut rec_times, mut gpu_times) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..6 {
        let start = std::time::Instant::now();
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        for i in 0..count {
            // The first pass writes the opening timestamp, the last the closing one.
            let timestamp_writes = query.as_ref().filter(|_| i == 0 || i + 1 == count).map(|q| {
                wgpu::ComputePassTimestampWrites {
                    query_set: q,
                    beginning_of_pass_write_index: (i == 0).then_some(0),
                    end_of_pass_write_index: (i + 1 == count).then_some(1),
                }
            });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        if let Some(q) = &query {
            encoder.resolve_query_set(q, 0..2, &resolve, 0);
            encoder.copy_buffer_to_buffer(&resolve, 0, &results, 0, 16);
        }
        let words = gpu.read_words(Some(encoder), &results, 4)?;
        let wall = start.elapsed().as_secs_f64() * 1e6 / count as f64;
        let begin = u64::from(words[0]) | (u64::from(words[1]) << 32);
        let end = u64::from(words[2]) | (u64::from(words[3]) << 32);
        let gpu_us = end.saturating_sub(begin) as f64 * f64::from(gpu.queue.get_timestamp_period()) / 1e3;
        let start = std::time::Instant::now();
        let rec = Recorder::new(gpu);
        for _ in 0..count {
            rec.dispatch(&kernel, &[1], &[], [1, 1, 1])?;
        }
        let probe = rec.alloc(kiln::DataType::F32, &[1])?;
        rec.read(&probe).map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        let recorded = start.elapsed().as_secs_f64() * 1e6 / count as f64;
        if round > 0 {
            raw.push(wall);
            rec_times.push(recorded);
            gpu_times.push(gpu_us / count as f64);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(DispatchOverhead {
        raw_us: median(raw),
        recorder_us: median(rec_times),
        gpu_us: timestamps.then(|| median(gpu_times)),
    })
}

/// Times `kernel` on `p` (all batches, random inputs, no check): a tactic's timing.
pub fn time_gemm_batched(p: crate::gemm::Product, reps: usize, kernel: GemmKernel) -> Result<MatmulTiming, BenchError> {
    let gpu = device::shared()?;
    let too_big = |x: usize| u32::try_from(x).map_err(|_| BenchError::BadShape { m: u32::MAX, n: 0, k: 0 });
    let (m, n, k, batches) = (too_big(p.m)?, too_big(p.n)?, too_big(p.k)?, too_big(p.batches)?);
    if !kernel.is_valid() {
        return Err(BenchError::BadKernel(kernel));
    }
    let (mk, kn) = (p.m * p.k, p.k * p.n);
    let a = gpu.storage_init("tactic A", &pack(&random_values(p.batches * mk, 7), kernel.storage).0)?;
    let b = gpu.storage_init("tactic B", &pack(&random_values(p.batches * kn, 11), kernel.storage).0)?;
    let c = gpu.storage("tactic C", (p.batches * p.m * p.n) as u64 * 4)?;
    let mut words = vec![m, n, k, batches, k, 1, n, 1];
    for i in 0..p.batches {
        words.push(too_big(i * mk)?);
        words.push(too_big(i * kn)?);
    }
    let params = gpu.storage_init("tactic params", &words)?;
    let pipeline = gpu.pipeline_trusted(&kernel.name(), || kernel.source())?;
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = [&params, &a, &b, &c]
        .iter()
        .enumerate()
        .map(|(i, buf)| wgpu::BindGroupEntry { binding: i as u32, resource: buf.as_entire_binding() })
        .collect();
    let bind_group = gpu.scoped("binding the tactic buffers", || {
        gpu.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries })
    })?;
    let (times, timer) = timed_runs(gpu, &pipeline, &bind_group, kernel.groups(m, n, batches), reps)?;
    Ok(MatmulTiming::of(times, 2.0 * p.batches as f64 * f64::from(m) * f64::from(n) * f64::from(k), timer))
}
