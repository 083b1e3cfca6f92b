//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on wgpu against the cpu oracle: exact
//! for integer outputs and for the float ones (the same f32 operations), on multipliers near
//! 1/2^k, where many results sit at a rounding tie.

use crate::common::{both, gpu, one_layer, rand_i32, rng, same_values, In};
use kiln::{
    ConvolutionParams, DataType, HostTensor, LayerKind, MatrixOp, QuantizedAnchor, QuantizedParams as Q, TensorData,
};

fn ints(shape: &[usize], dtype: DataType, lo: i32, hi: i32, seed: u64) -> HostTensor {
    let values = rand_i32(&mut rng(seed), shape, lo, hi).to_i64_vec().expect("ints");
    let data = match dtype {
        DataType::U8 => TensorData::U8(values.iter().map(|&v| v as u8).collect()),
        DataType::I8 => TensorData::I8(values.iter().map(|&v| v as i8).collect()),
        _ => TensorData::I32(values.iter().map(|&v| v as i32).collect()),
    };
    HostTensor::new(shape.to_vec(), data).expect("shape")
}

fn scalar(dtype: DataType, v: f64) -> HostTensor {
    let data = match dtype {
        DataType::U8 => TensorData::U8(vec![v as u8]),
        DataType::I8 => TensorData::I8(vec![v as i8]),
        _ => TensorData::F32(vec![v as f32]),
    };
    HostTensor::new(vec![], data).expect("scalar")
}

/// One integer layer: x (u8, zero 128) by constant int8 weights with per-channel scales and
/// zero points, an int32 or float bias, into `output`.
fn layer(anchor: QuantizedAnchor, x: &[usize], w: &[usize], channels: usize, bias: Option<DataType>, relu: bool, output: DataType) -> (kiln::Network, Vec<HostTensor>) {
    let w_scale: Vec<f32> = (0..channels).map(|k| [0.05, 0.025, 0.1, 0.0125][k % 4]).collect();
    let mut slots: Vec<In> = (0..Q::SLOTS).map(|_| In::Absent).collect();
    slots[Q::X] = In::Run(ints(x, DataType::U8, 0, 256, 1));
    slots[Q::W] = In::Const(ints(w, DataType::I8, -7, 8, 2));
    slots[Q::BIAS] = match bias {
        Some(DataType::I32) => In::Const(ints(&[channels], DataType::I32, -300, 300, 3)),
        Some(_) => In::Const(HostTensor::from_f32(vec![channels], (0..channels).map(|k| k as f32 * 0.37 - 1.0).collect()).expect("bias")),
        None => In::Absent,
    };
    slots[Q::X_SCALE] = In::Const(scalar(DataType::F32, 0.1));
    slots[Q::X_ZERO] = In::Const(scalar(DataType::U8, 128.0));
    slots[Q::W_SCALE] = In::Const(HostTensor::from_f32(vec![channels], w_scale).expect("scales"));
    slots[Q::W_ZERO] = In::Const(ints(&[channels], DataType::I8, -2, 3, 4));
    if output != DataType::F32 {
        slots[Q::Y_SCALE] = In::Const(scalar(DataType::F32, 0.02));
        slots[Q::Y_ZERO] = In::Const(scalar(output, if output == DataType::U8 { 100.0 } else { -3.0 }));
    }
    one_layer(LayerKind::Quantized(Q { anchor, relu, output }), slots)
}

fn conv(groups: usize, strides: &[usize], pads: &[usize]) -> QuantizedAnchor {
    QuantizedAnchor::Convolution(ConvolutionParams {
        groups,
        strides: strides.to_vec(),
        dilations: vec![1; strides.len()],
        pre_padding: pads.to_vec(),
        post_padding: pads.to_vec(),
    })
}

#[test]
fn integer_layers_match_the_cpu_oracle_exactly() {
    let Some(gpu) = gpu() else { return };
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        ("3x3 conv, int32 bias, ReLU, uint8", layer(conv(1, &[1, 1], &[1, 1]), &[2, 3, 7, 6], &[4, 3, 3, 3], 4, Some(DataType::I32), true, DataType::U8)),
        ("grouped strided conv, int8", layer(conv(2, &[2, 2], &[1, 1]), &[1, 4, 9, 9], &[6, 2, 3, 3], 6, None, false, DataType::I8)),
        ("conv, float bias, uint8", layer(conv(1, &[1, 1], &[0, 0]), &[2, 5, 4, 4], &[3, 5, 1, 1], 3, Some(DataType::F32), false, DataType::U8)),
        ("1-D conv, float output, ReLU", layer(conv(1, &[1], &[1]), &[2, 3, 11], &[5, 3, 3], 5, Some(DataType::F32), true, DataType::F32)),
        ("product, int32 bias, uint8", layer(matmul, &[3, 40], &[40, 8], 8, Some(DataType::I32), false, DataType::U8)),
        ("batched product, B transposed, float", layer(matmul_t, &[2, 5, 24], &[6, 24], 6, None, true, DataType::F32)),
    ];
    for (what, (net, feeds)) in cases {
        let (got, want) = both(&gpu, &net, &feeds);
        assert!(same_values(&got[0], &want[0]), "{what}: wgpu differs from the cpu oracle");
    }
}

/// The explicit-quantization fixture (as onnxruntime's quantize_static writes it) builds into
/// integer layers on wgpu too and gives onnxruntime's (= the cpu backend's) integers exactly.
#[test]
fn the_qdq_fixture_runs_as_integer_layers_and_matches_the_cpu_backend() {
    let Some(gpu) = gpu() else { return };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../engine/onnx/tests/data/qdq_conv_matmul_u8s8/model.onnx");
    let net = kiln_onnx::import_file(&path).expect("import");
    let engine = kiln::Builder::new(&gpu).build(&net, &kiln::BuilderConfig::default()).expect("wgpu build");
    let integer = engine.network().layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).count();
    assert_eq!(integer, 2, "{}", engine.network().dump());
    let x = HostTensor::from_f32(vec![2, 3, 6, 6], (0..216).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 1.6).collect()).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), x)]);
    let run = |backend: &dyn kiln::Backend| {
        let engine = kiln::Builder::new(backend).build(&net, &kiln::BuilderConfig::default()).expect("build");
        kiln::ExecutionContext::new(engine, backend).expect("prepare").run(&feeds).expect("run")
    };
    let (got, want) = (run(&gpu), run(&kiln_cpu::CpuBackend::new()));
    for name in ["y1", "y2"] {
        assert_eq!(got[name].data(), want[name].data(), "{name}");
    }
}
