//! Cold vs warm timing-cache build of a ResNet-style CNN (the PyTorch-exported model in
//! tests/data/pytorch, batch 8): a cold build times every conv/matmul tactic, a warm one
//! reads the cache (the issue asks for under 10% of the cold time).

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::{Builder, BuilderConfig, OptimizationProfile, TimingCache};
use kiln_cpu::CpuBackend;
use std::path::Path;
use std::time::Duration;

fn config(cache: TimingCache) -> BuilderConfig {
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("image", &[1, 3, 32, 32], &[8, 3, 32, 32], &[8, 3, 32, 32]);
    let mut config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    config.set_timing_cache(cache, false);
    config
}

fn bench(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/pytorch/cnn_torchscript.onnx");
    let network = kiln_onnx::import_file(&path).expect("the CNN fixture imports");
    let backend = CpuBackend::new();
    let builder = Builder::new(&backend);
    let warm = config(TimingCache::new());
    builder.build(&network, &warm).expect("cold build");
    let cache = warm.timing_cache().expect("attached");

    let mut group = c.benchmark_group("build_cnn_batch8");
    group.sample_size(10).measurement_time(Duration::from_secs(8));
    group.bench_function("cold_cache", |b| b.iter(|| builder.build(&network, &config(TimingCache::new())).expect("build")));
    group.bench_function("warm_cache", |b| b.iter(|| builder.build(&network, &config(cache.clone())).expect("build")));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
