//! Running one layer through the real path: network API, builder, execution context.

use half::{bf16, f16};
use kiln::{
    BackendError, BuildError, Builder, BuilderConfig, DataType, ExecutionContext, HostTensor, LayerKind, Network,
    NetworkError, RunError, Shape, TensorData,
};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

/// One input slot of the layer under test.
pub enum In {
    /// A network input, fed at run time (shape facts unknown to the builder's values).
    Run(HostTensor),
    /// A Constant layer (its value is known at build time).
    Const(HostTensor),
    /// An absent optional slot.
    Absent,
}

/// Why a layer did not run; the payloads are read through `Debug` in failure messages.
#[derive(Debug)]
#[allow(dead_code)]
pub enum Failure {
    Network(NetworkError),
    Build(BuildError),
    Run(RunError),
}

impl Failure {
    /// The reason of an execution error raised by the layer under test.
    pub fn execution_reason(&self) -> Option<&str> {
        match self {
            Failure::Run(RunError::Backend(BackendError::Execution { layer, reason })) if layer == "layer" => {
                Some(reason)
            }
            _ => None,
        }
    }
}

/// Builds a network holding `kind` fed by `inputs`, runs it on the cpu backend and returns
/// the layer's outputs in order.
pub fn try_run(kind: LayerKind, inputs: Vec<In>) -> Result<Vec<HostTensor>, Failure> {
    let mut net = Network::new("test");
    let mut feeds = HashMap::new();
    let mut slots = Vec::new();
    for (i, input) in inputs.into_iter().enumerate() {
        slots.push(match input {
            In::Run(t) => {
                let name = format!("in{i}");
                let id = net.add_input(&name, t.dtype(), Shape::fixed(t.shape())).map_err(Failure::Network)?;
                feeds.insert(name, t);
                Some(id)
            }
            In::Const(t) => {
                let w = net.add_weights(t);
                let layer = net
                    .add_layer(&format!("const{i}"), LayerKind::Constant { weights: w }, vec![])
                    .map_err(Failure::Network)?;
                Some(net.output(layer, 0))
            }
            In::Absent => None,
        });
    }
    let first_input = slots.first().copied().flatten();
    let layer = net.add_layer("layer", kind, slots).map_err(Failure::Network)?;
    let outputs = net.layer(layer).outputs.clone();
    for &t in &outputs {
        net.mark_output(t).map_err(Failure::Network)?;
    }
    if outputs.is_empty() {
        // Layers without outputs (Assertion) still need a network output.
        let source = first_input.expect("an input to pass through");
        let id = net.add_identity(source).map_err(Failure::Network)?;
        let t = net.output(id, 0);
        net.mark_output(t).map_err(Failure::Network)?;
    }
    let backend = CpuBackend::new();
    let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).map_err(Failure::Build)?;
    let ctx = ExecutionContext::new(engine, &backend).map_err(Failure::Run)?;
    let mut results = ctx.run(&feeds).map_err(Failure::Run)?;
    Ok(outputs.iter().map(|&t| results.remove(&net.tensor(t).name).expect("every output is returned")).collect())
}

/// Like [`try_run`], panicking with the failure.
pub fn run(kind: LayerKind, inputs: Vec<In>) -> Vec<HostTensor> {
    try_run(kind, inputs).unwrap_or_else(|e| panic!("layer failed: {e:?}"))
}

/// The single output of a layer.
pub fn run1(kind: LayerKind, inputs: Vec<In>) -> HostTensor {
    run(kind, inputs).remove(0)
}

/// The execution error reason of a layer that must fail while running.
pub fn run_err(kind: LayerKind, inputs: Vec<In>) -> String {
    match try_run(kind, inputs) {
        Ok(out) => panic!("expected an execution error, got {out:?}"),
        Err(e) => e.execution_reason().unwrap_or_else(|| panic!("expected an execution error, got {e:?}")).to_string(),
    }
}

pub fn f32s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F32(v.to_vec())).unwrap()
}

pub fn f64s(shape: &[usize], v: &[f64]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F64(v.to_vec())).unwrap()
}

pub fn f16s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect())).unwrap()
}

pub fn bf16s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect())).unwrap()
}

pub fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::I64(v.to_vec())).unwrap()
}

pub fn i32s(shape: &[usize], v: &[i32]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

pub fn i8s(shape: &[usize], v: &[i8]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::I8(v.to_vec())).unwrap()
}

pub fn u8s(shape: &[usize], v: &[u8]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::U8(v.to_vec())).unwrap()
}

pub fn bools(shape: &[usize], v: &[bool]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::Bool(v.to_vec())).unwrap()
}

/// A 1-D i64 parameter tensor.
pub fn ints(v: &[i64]) -> HostTensor {
    i64s(&[v.len()], v)
}

/// Asserts type, shape and values (within `tol`, absolute or relative) of a tensor.
#[track_caller]
pub fn assert_close(t: &HostTensor, dtype: DataType, shape: &[usize], expected: &[f64], tol: f64) {
    assert_eq!(t.dtype(), dtype, "dtype of {t:?}");
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    let got = t.to_f64_vec();
    assert_eq!(got.len(), expected.len(), "element count of {t:?}");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            g.is_nan()
        } else if e.is_infinite() {
            g == e
        } else {
            (g - e).abs() <= tol * e.abs().max(1.0)
        };
        assert!(ok, "element {i}: got {g}, expected {e} (tol {tol}); tensor {got:?}");
    }
}

/// Asserts exact equality of type, shape and data.
#[track_caller]
pub fn assert_exact(t: &HostTensor, expected: &HostTensor) {
    assert_eq!(t.dtype(), expected.dtype());
    assert_eq!(t.shape(), expected.shape());
    assert_eq!(t.data(), expected.data(), "got {t:?}, expected {expected:?}");
}
