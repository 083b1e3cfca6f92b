//! Precision flags and constraints (seed §6.5) on the cpu backend, which offers f16 and
//! bf16 for float layers but never as faster than f32.

use crate::common::{build, config, layer_types, run, PlainCpu};
use half::{bf16, f16};
use kiln::config::effective_flags;
use kiln::*;
use kiln_cpu::CpuBackend;

const X: [f32; 4] = [1.0001, 2.0003, -3.0007, 0.1];
const C: [f32; 4] = [3.0001, 0.3333, 1.2345, 7.77];

fn h(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

fn x_input() -> HostTensor {
    HostTensor::from_f32(vec![1, 4], X.to_vec()).unwrap()
}

/// `y = x * c` (layer `mul`) and `z = relu(y)` (layer `relu`); outputs `y` and `z`.
fn mul_relu() -> (Network, LayerId, LayerId) {
    let mut net = Network::new("mul-relu");
    let x = net.add_input("x", DataType::F32, [1, 4]).unwrap();
    let c = net.add_constant(&[1, 4], TensorData::F32(C.to_vec())).unwrap();
    let mul = net.add_elementwise(x, net.output(c, 0), ElementwiseOp::Prod).unwrap();
    net.set_layer_name(mul, "mul");
    net.set_tensor_name(net.output(mul, 0), "y").unwrap();
    let relu = net.add_activation(net.output(mul, 0), ActivationKind::Relu).unwrap();
    net.set_layer_name(relu, "relu");
    net.set_tensor_name(net.output(relu, 0), "z").unwrap();
    net.mark_output(net.output(mul, 0)).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    (net, mul, relu)
}

fn values(t: &HostTensor) -> Vec<f64> {
    t.to_f64_vec()
}

fn exact_f32() -> Vec<f64> {
    X.iter().zip(C).map(|(x, c)| (x * c) as f64).collect()
}

fn rounded_f16() -> Vec<f64> {
    X.iter().zip(C).map(|(&x, c)| h(h(x) * h(c)) as f64).collect()
}

#[test]
fn tf32_is_on_by_default_and_the_override_variable_turns_it_off() {
    let config = BuilderConfig::default();
    assert!(config.get_flag(BuilderFlag::Tf32));
    assert!(!config.get_flag(BuilderFlag::Fp16));
    let (flags, note) = effective_flags(config.builder_flags, Some("0"));
    assert!(!flags.contains(BuilderFlag::Tf32));
    assert!(note.unwrap().contains("NVIDIA_TF32_OVERRIDE=0"));
    for other in [None, Some("1"), Some("")] {
        let (flags, note) = effective_flags(config.builder_flags, other);
        assert!(flags.contains(BuilderFlag::Tf32) && note.is_none(), "{other:?}");
    }
    let (flags, _) = effective_flags(BuilderFlags::empty(), Some("0"));
    assert_eq!(flags, BuilderFlags::empty(), "a cleared TF32 flag stays cleared");
}

#[test]
fn unconstrained_layers_stay_f32_on_cpu_even_with_fp16_enabled() {
    let (net, _, _) = mul_relu();
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::Bf16]);
    // Neither flag changes a layer here, and the build says so, with the layer counts.
    assert_eq!(out.warnings.len(), 2, "{:?}", out.warnings);
    for (w, t) in out.warnings.iter().zip(["f16", "bf16"]) {
        assert!(w.contains(&format!("runs none of the network's layers in {t}; layer precisions: 2 f32")), "{w}");
    }
    assert!(out.log.iter().any(|l| l == "layer precisions: 2 f32"), "{:?}", out.log);
    assert!(!layer_types(&out.engine).contains(&"Cast"), "cpu is never faster in f16: {}", out.engine.network().dump());
    let got = run(out.engine, &[("x", x_input())]);
    assert_eq!(values(&got["y"]), exact_f32());
}

#[test]
fn an_obeyed_fp16_constraint_rounds_inputs_weights_and_result_to_f16() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    assert!(net.layer(mul).precision_is_set());
    assert_eq!(net.layer(mul).precision(), DataType::F16);
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let engine_net = out.engine.network();
    // The weights were converted, not cast at run time: one f16 blob, no f32 one.
    let blob_types: Vec<DataType> = engine_net.weights().iter().map(|w| w.dtype()).collect();
    assert_eq!(blob_types, vec![DataType::F16], "{}", engine_net.dump());
    let mul_layer = engine_net.layers().iter().find(|l| l.name == "mul").unwrap();
    assert_eq!(engine_net.tensor(mul_layer.outputs[0]).dtype, DataType::F16);
    let got = run(out.engine, &[("x", x_input())]);
    assert_eq!(got["y"].dtype(), DataType::F32, "network outputs keep their type");
    assert_eq!(values(&got["y"]), rounded_f16());
    let relu: Vec<f64> = rounded_f16().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(values(&got["z"]), relu, "the f32 relu reads the f16 result widened");
}

#[test]
fn bf16_constraints_round_to_bf16() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::BF16).unwrap();
    let out = build(&net, &[BuilderFlag::Bf16, BuilderFlag::PreferPrecisionConstraints]);
    let b = |x: f32| bf16::from_f32(x).to_f32();
    let expected: Vec<f64> = X.iter().zip(C).map(|(&x, c)| b(b(x) * b(c)) as f64).collect();
    assert_ne!(expected, exact_f32());
    assert_eq!(values(&run(out.engine, &[("x", x_input())])["y"]), expected);
}

#[test]
fn consecutive_f16_layers_share_one_cast_in_and_out() {
    let (mut net, mul, relu) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    net.set_layer_precision(relu, DataType::F16).unwrap();
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
    let engine_net = out.engine.network();
    let relu_layer = engine_net.layers().iter().find(|l| l.name == "relu").unwrap();
    let relu_input = engine_net.tensor(relu_layer.inputs[0].unwrap());
    assert_eq!(relu_input.dtype, DataType::F16, "relu reads mul's f16 result directly: {}", engine_net.dump());
    // x → f16 before mul; y and z → f32 for the network outputs.
    assert_eq!(layer_types(&out.engine).iter().filter(|&&t| t == "Cast").count(), 3, "{}", engine_net.dump());
    let got = run(out.engine, &[("x", x_input())]);
    let relu: Vec<f64> = rounded_f16().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(values(&got["z"]), relu);
}

#[test]
fn prefer_warns_and_falls_back_when_the_type_is_not_enabled() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let out = build(&net, &[BuilderFlag::PreferPrecisionConstraints]);
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("`mul`") && out.warnings[0].contains("FP16 builder flag"), "{}", out.warnings[0]);
    assert_eq!(values(&run(out.engine, &[("x", x_input())])["y"]), exact_f32());
}

#[test]
fn obey_fails_the_build_naming_the_layer() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[BuilderFlag::ObeyPrecisionConstraints])).unwrap_err();
    assert!(matches!(&err, BuildError::Precision(PrecisionError::Unsatisfiable { layer, .. }) if layer == "mul"), "{err:?}");
    assert!(err.to_string().contains("FP16 builder flag is not set"), "{err}");
}

#[test]
fn obey_fails_where_the_backend_does_not_offer_the_type_and_prefer_warns() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let backend = PlainCpu(CpuBackend::new());
    let err = Builder::new(&backend).build(&net, &config(&[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints])).unwrap_err();
    assert!(err.to_string().contains("`mul`") && err.to_string().contains("backend offers f32"), "{err}");
    let out = Builder::new(&backend)
        .build_with_report(&net, &config(&[BuilderFlag::Fp16, BuilderFlag::PreferPrecisionConstraints]))
        .unwrap();
    assert!(out.warnings[0].contains("backend offers f32"), "{:?}", out.warnings);
    assert_eq!(values(&run(out.engine, &[("x", x_input())])["y"]), exact_f32());
}

#[test]
fn without_prefer_or_obey_a_constraint_is_a_hint_kept_only_where_faster() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let out = build(&net, &[BuilderFlag::Fp16]);
    assert!(out.warnings.len() == 2 && out.warnings[0].contains("not faster"), "{:?}", out.warnings);
    assert!(out.warnings[1].contains("builder flag FP16 is set but backend `cpu` runs none"), "{:?}", out.warnings);
    assert_eq!(values(&run(out.engine, &[("x", x_input())])["y"]), exact_f32());
}

#[test]
fn both_constraint_flags_at_once_are_refused() {
    let (net, _, _) = mul_relu();
    let flags = [BuilderFlag::PreferPrecisionConstraints, BuilderFlag::ObeyPrecisionConstraints];
    let err = Builder::new(&CpuBackend::new()).build(&net, &config(&flags)).unwrap_err();
    assert!(matches!(err, BuildError::Precision(PrecisionError::ConflictingFlags)), "{err:?}");
}

#[test]
fn a_layer_output_type_inserts_a_cast_and_the_network_output_keeps_its_type() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_output_type(mul, 0, DataType::F16).unwrap();
    assert!(net.layer(mul).output_type_is_set(0) && !net.layer(mul).output_type_is_set(1));
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::PreferPrecisionConstraints]);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let got = run(out.engine, &[("x", x_input())]);
    // Computed in f32, stored as f16, handed back as the f32 the network output declares.
    let expected: Vec<f64> = X.iter().zip(C).map(|(&x, c)| h(x * c) as f64).collect();
    assert_eq!(got["y"].dtype(), DataType::F32);
    assert_eq!(values(&got["y"]), expected);
    assert_eq!(values(&got["z"]), expected.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
}

#[test]
fn a_network_output_type_casts_the_output() {
    let (mut net, _, relu) = mul_relu();
    let z = net.output(relu, 0);
    net.set_network_output_type(z, DataType::F16).unwrap();
    let y_layer_input = net.find_tensor("x").unwrap();
    assert!(net.set_network_output_type(y_layer_input, DataType::F16).is_err(), "inputs are not outputs");
    let out = build(&net, &[]);
    let got = run(out.engine, &[("x", x_input())]);
    assert_eq!(got["z"].dtype(), DataType::F16);
    let expected: Vec<f64> = X.iter().zip(C).map(|(&x, c)| h((x * c).max(0.0)) as f64).collect();
    assert_eq!(values(&got["z"]), expected);
    assert_eq!(got["y"].dtype(), DataType::F32);
}

#[test]
fn an_output_type_with_obey_needs_its_flag() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_output_type(mul, 0, DataType::F16).unwrap();
    let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[BuilderFlag::ObeyPrecisionConstraints])).unwrap_err();
    assert!(err.to_string().contains("output type f16") && err.to_string().contains("`mul`"), "{err}");
    assert!(net.set_layer_output_type(mul, 1, DataType::F16).is_err(), "mul has one output");
}

#[test]
fn fp16_convolution_matches_f32_within_f16_tolerance() {
    let mut net = Network::new("conv");
    let x = net.add_input("x", DataType::F32, [1, 2, 5, 5]).unwrap();
    let w: Vec<f32> = (0..54).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.0731).collect();
    let conv = net.add_convolution(x, 3, &[3, 3], TensorData::F32(w), Some(TensorData::F32(vec![0.1, -0.2, 0.3]))).unwrap();
    net.set_tensor_name(net.output(conv, 0), "y").unwrap();
    net.mark_output(net.output(conv, 0)).unwrap();
    let input = HostTensor::from_f32(vec![1, 2, 5, 5], (0..50).map(|i| (i as f32 * 0.37).sin()).collect()).unwrap();
    let reference = values(&run(build(&net, &[]).engine, &[("x", input.clone())])["y"]);
    let mut constrained = net.clone();
    constrained.set_layer_precision(conv, DataType::F16).unwrap();
    let out = build(&constrained, &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
    assert!(out.engine.network().weights().iter().all(|w| w.dtype() == DataType::F16), "kernel and bias converted");
    let got = values(&run(out.engine, &[("x", input)])["y"]);
    let mut differs = false;
    for (g, r) in got.iter().zip(&reference) {
        assert!((g - r).abs() <= 0.01 * r.abs().max(1.0), "{g} vs {r}");
        assert_eq!(*g, h(*g as f32) as f64, "results are f16 values");
        differs |= g != r;
    }
    assert!(differs, "an f16 convolution must not reproduce f32 exactly");
}

#[test]
fn the_precision_pass_dump_is_golden() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
    // Before: x → mul(x, c) → y → relu → z. After: mul reads f16 x and f16 weights (the
    // f32 blob is gone) and its result is widened back for its f32 readers.
    assert_eq!(out.engine.network().dump(), include_str!("golden/precision_mul_relu.txt"));
}

#[test]
fn strongly_typed_networks_refuse_precision_flags_and_constraints() {
    let mut net = Network::new_strongly_typed("typed");
    let x = net.add_input("x", DataType::F32, [4]).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    let err = net.set_layer_precision(relu, DataType::F16).unwrap_err();
    assert!(err.to_string().contains("strongly typed"), "{err}");
    assert!(net.set_layer_output_type(relu, 0, DataType::F16).is_err());
    assert!(net.set_network_output_type(net.output(relu, 0), DataType::F16).is_err());
    for flag in [BuilderFlag::Fp16, BuilderFlag::Bf16, BuilderFlag::PreferPrecisionConstraints, BuilderFlag::ObeyPrecisionConstraints] {
        let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[flag])).unwrap_err();
        assert!(matches!(&err, BuildError::Precision(PrecisionError::StronglyTyped { .. })), "{err:?}");
        assert!(err.to_string().contains(flag.name()), "{err}");
    }
    // TF32 concerns f32 arithmetic only: allowed (and on by default).
    build(&net, &[BuilderFlag::Tf32]);
}

#[test]
fn strongly_typed_networks_follow_their_casts() {
    let mut net = Network::new_strongly_typed("typed");
    let x = net.add_input("x", DataType::F32, [1, 4]).unwrap();
    let to_half = net.add_cast(x, DataType::F16).unwrap();
    let c = net.add_constant(&[1, 4], TensorData::F16(C.iter().map(|&c| f16::from_f32(c)).collect())).unwrap();
    let mul = net.add_elementwise(net.output(to_half, 0), net.output(c, 0), ElementwiseOp::Prod).unwrap();
    let back = net.add_cast(net.output(mul, 0), DataType::F32).unwrap();
    net.set_tensor_name(net.output(back, 0), "y").unwrap();
    net.mark_output(net.output(back, 0)).unwrap();
    let out = build(&net, &[]);
    assert_eq!(layer_types(&out.engine), vec!["Cast", "Constant", "ElementWise", "Cast"], "no cast added or removed");
    assert_eq!(values(&run(out.engine, &[("x", x_input())])["y"]), rounded_f16());
}

#[test]
fn a_constrained_layer_inside_a_loop_keeps_the_recurrence_working() {
    // acc ← acc · 1.0001 three times, the product computed in f16.
    let mut net = Network::new("loop");
    let x = net.add_input("x", DataType::F32, [2]).unwrap();
    let trips = net.add_constant(&[], TensorData::I32(vec![3])).unwrap();
    let c = net.add_constant(&[2], TensorData::F32(vec![1.0001, 3.0001])).unwrap();
    let looping = net.add_loop();
    net.add_trip_limit(looping, net.output(trips, 0), TripLimitKind::Count).unwrap();
    let rec = net.add_recurrence(looping, x).unwrap();
    let mul = net.add_elementwise(net.output(rec, 0), net.output(c, 0), ElementwiseOp::Prod).unwrap();
    net.set_recurrence_next(rec, net.output(mul, 0)).unwrap();
    let last = net.add_loop_output(looping, net.output(rec, 0), LoopOutputKind::LastValue, 0).unwrap();
    net.set_tensor_name(net.output(last, 0), "y").unwrap();
    net.mark_output(net.output(last, 0)).unwrap();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let out = build(&net, &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
    let input = HostTensor::from_f32(vec![2], vec![0.7, -1.3]).unwrap();
    let got = values(&run(out.engine, &[("x", input)])["y"]);
    let expected: Vec<f64> = [(0.7f32, 1.0001f32), (-1.3, 3.0001)]
        .iter()
        .map(|&(x, c)| (0..3).fold(x, |acc, _| h(h(acc) * h(c))) as f64)
        .collect();
    assert_eq!(got, expected);
}

/// Shape reads dims only: an f16 tensor reaches it as it is, with no cast back to f32.
#[test]
fn a_shape_layer_reads_an_f16_tensor_without_a_cast() {
    let (mut net, mul, _) = mul_relu();
    net.set_layer_precision(mul, DataType::F16).unwrap();
    let shape = net.add_layer("shape", LayerKind::Shape, vec![Some(net.output(mul, 0))]).unwrap();
    net.mark_output(net.output(shape, 0)).unwrap();
    let mut flags = BuilderFlags::empty();
    flags.set(BuilderFlag::Fp16);
    flags.set(BuilderFlag::ObeyPrecisionConstraints);
    let (typed, _) = precision::apply(&net, flags, &CpuBackend::new()).unwrap();
    let shape_layer = typed.layers().iter().find(|l| l.name == "shape").unwrap();
    assert_eq!(typed.tensor(shape_layer.inputs[0].unwrap()).dtype, DataType::F16, "{}", typed.dump());
    let got = kiln_cpu::CpuBackend::new().prepare(&typed).unwrap().execute(&[x_input()]).unwrap();
    let dims = got.iter().find(|t| t.dtype() == DataType::I64).expect("the shape output");
    assert_eq!(dims.to_i64_vec(), Some(vec![1, 4]));
}

/// `F.normalize(x, dim=1)` as exporters write it: `x / guard(‖x‖₂, 1e-12)`, the guard a Max
/// with a constant or a Clip; every layer constrained to f16. Rows: one zero, one ordinary.
fn normalize(clip: bool) -> Network {
    let mut net = Network::new("normalize");
    let x = net.add_input("x", DataType::F32, [2, 3]).unwrap();
    let norm = net.add_reduce(x, ReduceOp::L2, &[1], true).unwrap();
    let norm = net.output(norm, 0);
    let guard = if clip {
        net.add_activation(norm, ActivationKind::Clip { min: 1e-12, max: f32::MAX }).unwrap()
    } else {
        let eps = net.add_constant(&[1], TensorData::F32(vec![1e-12])).unwrap();
        net.add_elementwise(norm, net.output(eps, 0), ElementwiseOp::Max).unwrap()
    };
    let y = net.add_elementwise(x, net.output(guard, 0), ElementwiseOp::Div).unwrap();
    net.set_tensor_name(net.output(y, 0), "y").unwrap();
    net.mark_output(net.output(y, 0)).unwrap();
    for i in 0..net.layers().len() {
        if !matches!(net.layers()[i].kind, LayerKind::Constant { .. }) {
            net.set_layer_precision(LayerId(i), DataType::F16).unwrap();
        }
    }
    net
}

#[test]
fn an_epsilon_f16_cannot_hold_still_guards_a_division_in_f16() {
    for clip in [false, true] {
        let out = build(&normalize(clip), &[BuilderFlag::Fp16, BuilderFlag::ObeyPrecisionConstraints]);
        assert!(out.warnings.iter().any(|w| w.contains("smallest subnormal")), "clip {clip}: {:?}", out.warnings);
        let x = HostTensor::from_f32(vec![2, 3], vec![0.0, 0.0, 0.0, 3.0, 0.0, 4.0]).unwrap();
        let got = values(&run(out.engine, &[("x", x)])["y"]);
        // 1e-12 flushed to zero would make the zero row 0/0.
        assert_eq!(got, vec![0.0, 0.0, 0.0, f64::from(h(0.6)), 0.0, f64::from(h(0.8))], "clip {clip}");
    }
}
