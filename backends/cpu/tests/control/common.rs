//! Building and running small control-flow networks.

use kiln::{
    BuildError, Builder, BuilderConfig, DataType, Engine, ExecutionContext, HostTensor, Network, RunError, TensorData,
    TensorId,
};
use kiln_cpu::CpuBackend;
use std::collections::{BTreeMap, HashMap};

pub fn f32s(shape: &[usize], values: &[f32]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F32(values.to_vec())).unwrap()
}

pub fn i32_scalar(v: i32) -> HostTensor {
    HostTensor::scalar(TensorData::I32(vec![v])).unwrap()
}

pub fn bool_scalar(v: bool) -> HostTensor {
    HostTensor::scalar(TensorData::Bool(vec![v])).unwrap()
}

/// A constant tensor in the network.
pub fn constant(net: &mut Network, shape: &[usize], data: TensorData) -> TensorId {
    let layer = net.add_constant(shape, data).unwrap();
    net.output(layer, 0)
}

pub fn build(net: &Network) -> Result<Engine, BuildError> {
    build_with(net, &BuilderConfig::default())
}

pub fn build_with(net: &Network, config: &BuilderConfig) -> Result<Engine, BuildError> {
    Builder::new(&CpuBackend::new()).build(net, config)
}

/// Builds, serializes, reloads and runs the network on the cpu backend.
pub fn try_run(net: &Network, feeds: &[(&str, HostTensor)]) -> Result<BTreeMap<String, HostTensor>, RunError> {
    let engine = build(net).expect("the network builds");
    run_engine(engine, feeds)
}

pub fn run_engine(engine: Engine, feeds: &[(&str, HostTensor)]) -> Result<BTreeMap<String, HostTensor>, RunError> {
    let engine = Engine::deserialize(&engine.serialize()).expect("the engine file reloads");
    let backend = CpuBackend::new();
    let ctx = ExecutionContext::new(engine, &backend)?;
    let feeds: HashMap<String, HostTensor> = feeds.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    ctx.run(&feeds)
}

/// Runs and returns the one output named `output`.
pub fn run_one(net: &Network, feeds: &[(&str, HostTensor)], output: TensorId) -> HostTensor {
    let name = net.tensor(output).name.clone();
    let mut outs = try_run(net, feeds).unwrap_or_else(|e| panic!("the network runs: {e}"));
    outs.remove(&name).expect("the output is there")
}

/// The build error's text (the network must fail to build).
pub fn build_error(net: &Network) -> String {
    match build(net) {
        Ok(_) => panic!("the network built, but it breaks a rule"),
        Err(e) => e.to_string(),
    }
}

pub fn values(t: &HostTensor) -> Vec<f64> {
    t.to_f64_vec()
}

pub fn input(net: &mut Network, name: &str, dtype: DataType, shape: &[usize]) -> TensorId {
    net.add_input(name, dtype, shape).unwrap()
}
