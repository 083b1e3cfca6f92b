//! The runtime API on the cpu backend: dynamic shapes within optimization profiles,
//! output shapes before running, buffers bound by name, streams, the input-consumed event,
//! empty tensors, several contexts on several threads.

mod api;
mod device_io;
mod dynamic;
mod memory;
mod profile;

use kiln::*;
use kiln_cpu::CpuBackend;
use std::sync::Arc;

pub fn n() -> Dim {
    Dim::Named("N".into())
}

/// `x [N,16] → relu → exp → abs → neg → y` (`y = -exp(relu(x))`), batch `N`.
pub fn chain_net(batch: Dim) -> Network {
    let mut net = Network::new("chain");
    let x = net.add_input("x", DataType::F32, Shape(vec![batch, Dim::Fixed(16)])).unwrap();
    let a = net.add_activation(x, ActivationKind::Relu).unwrap();
    let b = net.add_unary(net.output(a, 0), UnaryOp::Exp).unwrap();
    let c = net.add_unary(net.output(b, 0), UnaryOp::Abs).unwrap();
    let d = net.add_unary(net.output(c, 0), UnaryOp::Neg).unwrap();
    net.set_tensor_name(net.output(d, 0), "y").unwrap();
    net.mark_output(net.output(d, 0)).unwrap();
    net
}

pub fn expected_chain(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| -v.max(0.0).exp()).collect()
}

pub fn profile(min: usize, opt: usize, max: usize) -> OptimizationProfile {
    let mut p = OptimizationProfile::new();
    p.set_dimensions("x", &[min, 16], &[opt, 16], &[max, 16]);
    p
}

pub fn prepare(net: &Network, profiles: Vec<OptimizationProfile>) -> Arc<PreparedEngine> {
    let backend = CpuBackend::new();
    let config = BuilderConfig { profiles, ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(net, &config).expect("build");
    PreparedEngine::new(engine, &backend).expect("prepare")
}

/// Deterministic inputs that differ per batch row and per call (`salt`).
pub fn input_values(len: usize, salt: f32) -> Vec<f32> {
    (0..len).map(|i| (i as f32 * 0.37 + salt).sin() * 2.0).collect()
}

pub fn f32_buffer(values: &[f32]) -> Buffer {
    Buffer::from_tensor(&HostTensor::from_f32(vec![values.len()], values.to_vec()).unwrap())
}

pub fn read_f32(buffer: &Buffer, dims: &[usize]) -> Vec<f32> {
    buffer.read_tensor(DataType::F32, dims).expect("buffer holds the output").as_f32().unwrap().to_vec()
}

/// Sets `x` to `batch` rows, binds fresh buffers, runs on a new stream and returns `y`.
pub fn run_batch(ctx: &mut ExecutionContext, batch: usize, salt: f32) -> (Vec<f32>, Vec<f32>) {
    let x = input_values(batch * 16, salt);
    ctx.set_input_shape("x", &[batch, 16]).unwrap();
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![batch as i64, 16]);
    let out = Buffer::new(batch * 16 * 4);
    ctx.set_tensor_address("x", f32_buffer(&x)).unwrap();
    ctx.set_tensor_address("y", out.clone()).unwrap();
    let stream = Stream::new().unwrap();
    ctx.enqueue(&stream, None).unwrap();
    stream.synchronize().unwrap();
    (x, read_f32(&out, &[batch, 16]))
}
