//! `compare` against deliberately broken backends: a cpu backend that adds an error to
//! chosen tensors, and one that cannot run at all.

use super::stats::{Detail, ToleranceSet, Tolerances};
use super::*;
use kiln::ir::control::ControlFlow;
use kiln::{BackendError, DeviceFingerprint, Executable, KernelError, TensorData};
use kiln_cpu::CpuBackend;

/// The cpu backend, except that each named tensor (a network output, or with mark-all
/// any marked layer output) gets `error` added to its first element.
struct PerturbedBackend {
    inner: CpuBackend,
    errors: Vec<(String, f32)>,
}

struct PerturbedExecutable {
    inner: Box<dyn Executable>,
    /// (output index, error) of the tensors to perturb.
    errors: Vec<(usize, f32)>,
}

impl Backend for PerturbedBackend {
    fn name(&self) -> &str {
        "perturbed"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        Ok(DeviceFingerprint { backend: self.name().into(), ..self.inner.device()? })
    }
    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        self.inner.check_support(network)
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &ControlFlow,
        tactics: &[Option<kiln::tactics::TacticId>],
        math: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        let errors = self
            .errors
            .iter()
            .filter_map(|(name, error)| {
                let index = network.outputs().iter().position(|&t| &network.tensor(t).name == name)?;
                Some((index, *error))
            })
            .collect();
        Ok(Box::new(PerturbedExecutable { inner: self.inner.prepare_plan(network, control, tactics, math)?, errors }))
    }
}

impl Executable for PerturbedExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let mut outputs = self.inner.execute(inputs)?;
        for &(index, error) in &self.errors {
            let tensor = &mut outputs[index];
            let shape = tensor.shape().to_vec();
            let TensorData::F32(mut values) = tensor.clone().into_data() else {
                panic!("the test perturbs f32 tensors only");
            };
            values[0] += error;
            *tensor = HostTensor::from_f32(shape, values).expect("same shape");
        }
        Ok(outputs)
    }
}

/// A backend whose device is present but which fails every run.
struct BrokenBackend;

impl Backend for BrokenBackend {
    fn name(&self) -> &str {
        "broken"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        Ok(DeviceFingerprint { backend: self.name().into(), ..CpuBackend::new().device()? })
    }
    fn check_support(&self, _: &Network) -> Result<(), BackendError> {
        Ok(())
    }
    fn prepare_plan(
        &self,
        _: &Network,
        _: &ControlFlow,
        _: &[Option<kiln::tactics::TacticId>],
        _: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        Err(BackendError::Execution { layer: "everything".into(), reason: "deliberately broken".into() })
    }
}

fn mnist() -> (Network, HashMap<String, HostTensor>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models/mnist.onnx");
    let network = kiln_onnx::import_file(&path).expect("import mnist");
    let inputs = crate::random_inputs::random(&network, &Default::default(), 0, None).expect("random inputs");
    (network, inputs)
}

fn options(mark_all: bool) -> CompareOptions {
    CompareOptions { config: BuilderConfig::default(), tolerances: ToleranceSet::uniform(Tolerances { rtol: 1e-5, atol: 1e-5 }), mark_all }
}

/// The layer outputs of mnist's marked network, in layer order, with their layers.
fn marked_layer_outputs(network: &Network) -> Vec<(String, TensorOrigin)> {
    let (marked, origins) = mark_all_outputs(network).unwrap();
    marked.outputs().iter().zip(origins).filter_map(|(&t, o)| Some((marked.tensor(t).name.clone(), o?))).collect()
}

#[test]
fn identical_backends_pass() {
    let (network, inputs) = mnist();
    let (a, b) = (CpuBackend::new(), CpuBackend::new());
    let result = compare(&network, &[&a, &b], &inputs, &options(false)).unwrap();
    assert!(result.passed(), "{result:?}");
    assert_eq!(result.pairs.len(), 1);
    let (prob, origin) = &result.pairs[0].tensors[0];
    assert_eq!(prob.name, "prob");
    assert!(origin.as_ref().unwrap().is_network_output);
    // Two builds may pick different cpu tactics (by timing), so not always bit-identical.
    let Detail::Float(errors) = &prob.detail else { panic!("float output") };
    assert!(errors.absolute.unwrap().max < 1e-6, "{errors:?}");
}

#[test]
fn a_perturbed_output_fails_with_its_error_figures() {
    let (network, inputs) = mnist();
    let perturbed = PerturbedBackend { inner: CpuBackend::new(), errors: vec![("prob".into(), 0.25)] };
    let reference = CpuBackend::new();
    let result = compare(&network, &[&perturbed, &reference], &inputs, &options(false)).unwrap();
    assert!(!result.passed());
    let (prob, _) = &result.pairs[0].tensors[0];
    assert_eq!(prob.mismatches, 1);
    let Detail::Float(errors) = &prob.detail else { panic!("float output") };
    let max = errors.absolute.unwrap().max;
    assert!((max - 0.25).abs() < 1e-6, "max abs error {max}");
    assert_eq!(errors.worst.map(|w| w.0), Some(0));
}

#[test]
fn an_error_within_tolerance_passes() {
    let (network, inputs) = mnist();
    let perturbed = PerturbedBackend { inner: CpuBackend::new(), errors: vec![("prob".into(), 1e-7)] };
    let reference = CpuBackend::new();
    let result = compare(&network, &[&perturbed, &reference], &inputs, &options(false)).unwrap();
    assert!(result.passed(), "{result:?}");
}

#[test]
fn mark_all_names_the_first_diverging_layer() {
    let (network, inputs) = mnist();
    let layers = marked_layer_outputs(&network);
    assert!(layers.len() >= 4, "mnist has several layers: {layers:?}");
    // Perturb a late layer strongly and an earlier one slightly (still out of tolerance):
    // the earlier one must be named, whatever the sizes of the errors.
    let (early, early_origin) = layers[1].clone();
    let (late, _) = layers[layers.len() - 2].clone();
    let perturbed =
        PerturbedBackend { inner: CpuBackend::new(), errors: vec![(late.clone(), 5.0), (early.clone(), 1e-2)] };
    let reference = CpuBackend::new();
    let result = compare(&network, &[&perturbed, &reference], &inputs, &options(true)).unwrap();
    assert_eq!(result.optimization, Optimization::None);
    assert_eq!(result.compared_tensors, layers.len());
    let pair = &result.pairs[0];
    assert!(!pair.passed());
    let (first, origin) = pair.first_divergence().expect("a divergence");
    assert_eq!(first.name, early);
    assert_eq!(origin.as_ref(), Some(&early_origin));
    let failing: Vec<&str> = pair.tensors.iter().filter(|(t, _)| !t.passed()).map(|(t, _)| t.name.as_str()).collect();
    assert_eq!(failing, vec![early.as_str(), late.as_str()]);
}

#[test]
fn mark_all_on_identical_backends_compares_every_layer_and_passes() {
    let (network, inputs) = mnist();
    let (a, b) = (CpuBackend::new(), CpuBackend::new());
    let result = compare(&network, &[&a, &b], &inputs, &options(true)).unwrap();
    assert!(result.passed(), "{result:?}");
    assert!(result.pairs[0].first_divergence().is_none());
    let origins: Vec<usize> =
        result.pairs[0].tensors.iter().filter_map(|(_, o)| o.as_ref().map(|o| o.layer_index)).collect();
    assert_eq!(origins.len(), result.compared_tensors);
}

#[test]
fn a_backend_that_cannot_run_is_not_a_mismatch() {
    let (network, inputs) = mnist();
    let reference = CpuBackend::new();
    let error = compare(&network, &[&BrokenBackend, &reference], &inputs, &options(false)).unwrap_err();
    let CompareError::BackendFailed { backend, stage, reason } = &error else { panic!("{error}") };
    assert_eq!((backend.as_str(), *stage), ("broken", Stage::Prepare));
    assert!(reason.contains("deliberately broken"), "{reason}");
}

#[test]
fn one_backend_is_too_few() {
    let (network, inputs) = mnist();
    let only = CpuBackend::new();
    assert!(matches!(compare(&network, &[&only], &inputs, &options(false)), Err(CompareError::TooFewBackends(1))));
}

/// A small backend of its own (f32 Tanh/Sigmoid/Relu and same-shape Sum/Prod) whose
/// kernel for one layer is wrong by `error`: the error flows into every later layer, as a
/// real kernel bug's would, through kiln's plan interpreter.
struct MiniBackend {
    wrong_layer: usize,
    error: f32,
}

struct MiniExecutable {
    network: Network,
    plan: kiln::ir::control::ControlFlow,
    frees: Vec<Vec<usize>>,
    wrong_layer: usize,
    error: f32,
}

impl Backend for MiniBackend {
    fn name(&self) -> &str {
        "mini"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        Ok(DeviceFingerprint { backend: "mini".into(), name: "mini".into(), ..DeviceFingerprint::default() })
    }
    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        match network
            .layers()
            .iter()
            .find(|l| !matches!(l.kind, LayerKind::Activation { .. } | LayerKind::Elementwise { .. }))
        {
            Some(l) => Err(BackendError::Unsupported {
                backend: "mini".into(),
                layer: l.name.clone(),
                kind: l.kind.type_name().into(),
                reason: "not a mini kernel".into(),
            }),
            None => Ok(()),
        }
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &ControlFlow,
        _: &[Option<kiln::tactics::TacticId>],
        _math: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        self.check_support(network)?;
        let plan = control.clone();
        let frees = kiln::runtime::interp::top_level_frees(network, &plan.body.steps);
        let (wrong_layer, error) = (self.wrong_layer, self.error);
        Ok(Box::new(MiniExecutable { network: network.clone(), plan, frees, wrong_layer, error }))
    }
}

impl kiln::runtime::machine::Machine for MiniExecutable {
    type Value = std::sync::Arc<HostTensor>;

    fn network(&self) -> &Network {
        &self.network
    }
    fn backend_name(&self) -> &str {
        "mini"
    }
    /// A host backend like the cpu reference: its (deliberately wrong) kernel runs on every
    /// layer, including the small ones inference could evaluate.
    fn skips_inferred_layers(&self) -> bool {
        false
    }
    fn meta(&self, value: &Self::Value) -> (kiln::DataType, Vec<usize>) {
        (value.dtype(), value.shape().to_vec())
    }
    fn host_copy(&self, value: &Self::Value) -> Option<std::sync::Arc<HostTensor>> {
        Some(value.clone())
    }
    fn host_value(&self, tensor: std::sync::Arc<HostTensor>) -> Self::Value {
        tensor
    }
    fn run_kernel(
        &self,
        id: kiln::LayerId,
        inputs: &[Option<Self::Value>],
        _: &[Option<kiln::ir::infer::Fact>],
        _: &[kiln::ir::infer::OutFact],
    ) -> Result<Vec<Self::Value>, KernelError> {
        use kiln::{ActivationKind, ElementwiseOp};
        let arg = |i: usize| inputs.get(i).cloned().flatten().ok_or("missing input");
        let x = arg(0)?;
        let xs = x.as_f32().ok_or("f32 only")?;
        let mut out: Vec<f32> = match &self.network.layer(id).kind {
            LayerKind::Activation { kind: ActivationKind::Tanh } => xs.iter().map(|v| v.tanh()).collect(),
            LayerKind::Activation { kind: ActivationKind::Sigmoid } => {
                xs.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect()
            }
            LayerKind::Activation { kind: ActivationKind::Relu } => xs.iter().map(|v| v.max(0.0)).collect(),
            LayerKind::Elementwise { op } => {
                let y = arg(1)?;
                let ys = y.as_f32().filter(|ys| ys.len() == xs.len()).ok_or("same-shape f32 only")?;
                match op {
                    ElementwiseOp::Sum => xs.iter().zip(ys).map(|(a, b)| a + b).collect(),
                    ElementwiseOp::Prod => xs.iter().zip(ys).map(|(a, b)| a * b).collect(),
                    other => return Err(KernelError::Unsupported(format!("no mini kernel for {other:?}"))),
                }
            }
            other => return Err(KernelError::Unsupported(format!("no mini kernel for {}", other.type_name()))),
        };
        if id.0 == self.wrong_layer {
            out.iter_mut().for_each(|v| *v += self.error);
        }
        Ok(vec![std::sync::Arc::new(HostTensor::from_f32(x.shape().to_vec(), out).map_err(|e| e.to_string())?)])
    }
    fn to_host(&self, value: &Self::Value) -> Result<std::sync::Arc<HostTensor>, KernelError> {
        Ok(value.clone())
    }
    fn from_host(&self, tensor: std::sync::Arc<HostTensor>) -> Result<Self::Value, KernelError> {
        Ok(tensor)
    }
    fn slice_along(&self, _: &Self::Value, _: usize, _: usize) -> Result<Self::Value, KernelError> {
        Err("no loops in mini".into())
    }
    fn stack_along(
        &self,
        _: &[Self::Value],
        _: usize,
        _: usize,
        _: bool,
        _: kiln::DataType,
        _: &[usize],
    ) -> Result<Self::Value, KernelError> {
        Err("no loops in mini".into())
    }
}

impl Executable for MiniExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let values = inputs.iter().map(|x| std::sync::Arc::new(x.clone())).collect();
        let outputs = kiln::runtime::interp::run_plan(self, &self.plan, &self.frees, values)?;
        Ok(outputs.into_iter().map(|v| (*v).clone()).collect())
    }
}

#[test]
fn mark_all_names_the_layer_whose_error_propagates_downstream() {
    use kiln::{ActivationKind, DataType, ElementwiseOp};
    // e = relu(sigmoid(tanh(x) * x) + tanh(x)); the Prod kernel is off by 1e-3.
    let mut network = Network::new("chain");
    let x = network.add_input("x", DataType::F32, kiln::Shape::fixed(&[2, 8])).unwrap();
    let layer = |network: &Network, id: kiln::LayerId| network.output(id, 0);
    let a = network.add_activation(x, ActivationKind::Tanh).unwrap();
    let a = layer(&network, a);
    let prod = network.add_elementwise(a, x, ElementwiseOp::Prod).unwrap();
    let b = layer(&network, prod);
    let c = network.add_activation(b, ActivationKind::Sigmoid).unwrap();
    let c = layer(&network, c);
    let d = network.add_elementwise(c, a, ElementwiseOp::Sum).unwrap();
    let d = layer(&network, d);
    let e = network.add_activation(d, ActivationKind::Relu).unwrap();
    let e = layer(&network, e);
    network.mark_output(e).unwrap();
    let inputs = crate::random_inputs::random(&network, &Default::default(), 0, None).unwrap();

    let wrong = MiniBackend { wrong_layer: prod.0, error: 1e-3 };
    let reference = CpuBackend::new();
    let result = compare(&network, &[&wrong, &reference], &inputs, &options(true)).unwrap();
    let pair = &result.pairs[0];
    let failing: Vec<TensorId> = pair
        .tensors
        .iter()
        .filter(|(t, _)| !t.passed())
        .map(|(t, _)| network.find_tensor(&t.name).expect("a network tensor"))
        .collect();
    // The error reached every later layer (sigmoid damps it, the sum keeps it)...
    assert!(failing.contains(&b) && failing.contains(&d) && failing.contains(&e), "{pair:?}");
    assert!(!failing.contains(&a), "tanh is right: {pair:?}");
    // ...and the Prod layer is named as where it starts.
    let (_, origin) = pair.first_divergence().expect("a divergence");
    assert_eq!(origin.as_ref().map(|o| (o.layer_index, o.layer_type)), Some((prod.0, "ElementWise")));

    // The same backend without the error agrees with the cpu backend.
    let right = MiniBackend { wrong_layer: usize::MAX, error: 0.0 };
    assert!(compare(&network, &[&right, &reference], &inputs, &options(true)).unwrap().passed());
}
