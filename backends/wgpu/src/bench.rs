//! Timing the MatrixMultiply kernel on the shared device: GPU timestamps around each
//! dispatch where the adapter has TIMESTAMP_QUERY, wall-clock per submission otherwise.

use crate::device::{self, DeviceError};
use crate::ops::Storage;
use crate::shaders::Instance;

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
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
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
    times.sort_by(f64::total_cmp);
    let median_ms = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    let flops = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
    Ok(MatmulTiming {
        median_ms,
        tflops: flops / (median_ms * 1e-3) / 1e12,
        timer: if timestamps { "timestamp" } else { "wall-clock" },
    })
}
