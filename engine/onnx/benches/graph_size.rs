//! Import + build time against graph size (issue #25): a Relu chain, an alternating
//! Add/Mul/Sub chain and a wide graph of parallel branches, at 1k, 10k and 50k nodes, built
//! for the cpu backend. Near-linear growth means the 50k time is about 50 times the 1k one.
//!
//! `cargo bench -p kiln-onnx --bench graph_size`

#[path = "../tests/common/large_graphs.rs"]
mod large_graphs;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::{Builder, BuilderConfig};
use kiln_cpu::CpuBackend;
use large_graphs::LargeGraph;
use prost::Message;
use std::time::Duration;

const SIZES: [usize; 3] = [1_000, 10_000, 50_000];

fn bench(c: &mut Criterion) {
    let backend = CpuBackend::new();
    let builder = Builder::new(&backend);
    let config = BuilderConfig::default();
    for kind in LargeGraph::ALL {
        let mut group = c.benchmark_group(format!("import_and_build/{}", kind.name()));
        group.sample_size(10).measurement_time(Duration::from_secs(10));
        for nodes in SIZES {
            let bytes = kind.model(nodes).encode_to_vec();
            group.throughput(Throughput::Elements(nodes as u64));
            group.bench_with_input(BenchmarkId::from_parameter(nodes), &bytes, |b, bytes| {
                b.iter(|| {
                    let network = kiln_onnx::import_bytes(bytes, None).expect("the generated model imports");
                    builder.build(&network, &config).expect("the generated model builds")
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
