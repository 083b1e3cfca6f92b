//! Tensors too large for memory: an error naming the layer and the size, at build time
//! for shapes the build knows and when the engine runs for shapes decided by values.

use kiln::*;
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

/// `y = expand(x, int(dims))`: the output's shape is decided by the values of the data
/// input `dims` (not a shape input a profile bounds).
fn expand_to_input_dims() -> Network {
    let mut net = Network::new("expand");
    let x = net.add_input("x", DataType::F32, [1]).unwrap();
    let dims = net.add_input("dims", DataType::F32, [2]).unwrap();
    let dims = net.add_cast(dims, DataType::I64).unwrap();
    let expand = net.add_layer("grow", LayerKind::Expand, vec![Some(x), Some(net.output(dims, 0))]).unwrap();
    net.set_tensor_name(net.output(expand, 0), "y").unwrap();
    net.mark_output(net.output(expand, 0)).unwrap();
    net
}

fn run_with_dims(config: &BuilderConfig, dims: [f32; 2]) -> Result<HashMap<String, HostTensor>, String> {
    let net = expand_to_input_dims();
    let engine = Builder::new(&CpuBackend::new()).build(&net, config).map_err(|e| e.to_string())?;
    let engine = Engine::deserialize(&engine.serialize()).expect("the engine reloads");
    let ctx = ExecutionContext::new(engine, &CpuBackend::new()).map_err(|e| e.to_string())?;
    let feeds = HashMap::from([
        ("x".to_string(), HostTensor::new(vec![1], TensorData::F32(vec![2.0])).unwrap()),
        ("dims".to_string(), HostTensor::new(vec![2], TensorData::F32(dims.to_vec())).unwrap()),
    ]);
    ctx.run(&feeds).map(|o| o.into_iter().collect()).map_err(|e| e.to_string())
}

#[test]
fn a_shape_decided_at_run_time_is_checked_against_the_engines_memory_budget() {
    let config = BuilderConfig { max_memory_bytes: Some(1 << 20), ..BuilderConfig::default() };
    let outs = run_with_dims(&config, [256.0, 1024.0]).expect("1 MiB fits");
    assert_eq!(outs["y"].shape(), &[256, 1024]);
    let err = run_with_dims(&config, [257.0, 1024.0]).unwrap_err();
    assert!(err.contains("`grow`") && err.contains("f32[257, 1024] needs 1.0 MiB, over the memory budget of 1.0 MiB"), "{err}");
}

#[test]
fn an_element_count_that_overflows_is_an_error_not_a_wrapped_size() {
    let err = run_with_dims(&BuilderConfig::default(), [4294967296.0, 4294967296.0]).unwrap_err();
    assert!(err.contains("`grow`") && err.contains("f32[4294967296, 4294967296] has more elements than any memory can hold"), "{err}");
}

#[test]
fn the_machines_memory_is_the_default_budget() {
    // 2^60 bytes exceed any host, so the default budget refuses them whatever it is here.
    let err = run_with_dims(&BuilderConfig::default(), [536870912.0, 536870912.0]).unwrap_err();
    assert!(err.contains("f32[536870912, 536870912] needs 1.0 EiB, over the memory budget of"), "{err}");
}

#[test]
fn a_fixed_shape_over_the_budget_fails_the_build_naming_layer_and_size() {
    let mut net = Network::new("wide");
    let x = net.add_input("x", DataType::F32, [1024, 1024]).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    let config = BuilderConfig { max_memory_bytes: Some(1 << 21), ..BuilderConfig::default() };
    let err = Builder::new(&CpuBackend::new()).build(&net, &config).unwrap_err();
    assert!(matches!(err, BuildError::TensorTooLarge(_)), "{err:?}");
    assert!(err.to_string().contains("input `x`: f32[1024, 1024] needs 4.0 MiB, over the memory budget of 2.0 MiB"), "{err}");
    let config = BuilderConfig { max_memory_bytes: Some(4 << 20), ..BuilderConfig::default() };
    let engine = Builder::new(&CpuBackend::new()).build(&net, &config).expect("4 MiB fits");
    assert_eq!(Engine::deserialize(&engine.serialize()).unwrap().control_flow().max_memory_bytes, Some(4 << 20));
}
