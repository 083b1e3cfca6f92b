//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on cuda against the cpu oracle, value for
//! value: symmetric int8 layers on the INT8 tensor-core paths (cuBLASLt IMMA for products and
//! 1x1 convolutions, cuDNN's INT8 convolution), the others (uint8 with zero points, grouped or 1-D convolutions) on the exact
//! f32 fallback; multipliers near 1/2^k put many results at a rounding tie.

use crate::common::{backend, check_network, one_layer, rng, In};
use kiln::{ConvolutionParams, DataType, HostTensor, LayerKind, MatrixOp, QuantizedAnchor, QuantizedParams as Q, TensorData};
use rand::Rng;

fn ints(shape: &[usize], dtype: DataType, lo: i32, hi: i32, seed: u64) -> HostTensor {
    let mut r = rng(seed);
    let values: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| r.gen_range(lo..hi)).collect();
    let data = match dtype {
        DataType::U8 => TensorData::U8(values.iter().map(|&v| v as u8).collect()),
        DataType::I8 => TensorData::I8(values.iter().map(|&v| v as i8).collect()),
        _ => TensorData::I32(values),
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

/// How a test layer's operands are quantized.
#[derive(Clone, Copy)]
enum Operands {
    /// x uint8 with zero point 128, weights with per-channel zero points: the f32 fallback.
    Asymmetric,
    /// int8 with zero points 0 (absent for the weights): the tensor-core paths.
    Symmetric,
}

fn layer(anchor: QuantizedAnchor, operands: Operands, x: &[usize], w: &[usize], channels: usize, bias: Option<DataType>, relu: bool, output: DataType) -> (kiln::Network, Vec<HostTensor>) {
    let w_scale: Vec<f32> = (0..channels).map(|k| [0.05, 0.025, 0.1, 0.0125][k % 4]).collect();
    let mut slots: Vec<In> = (0..Q::SLOTS).map(|_| In::Absent).collect();
    let x_type = match operands {
        Operands::Asymmetric => DataType::U8,
        Operands::Symmetric => DataType::I8,
    };
    slots[Q::X] = In::Run(match operands {
        Operands::Asymmetric => ints(x, DataType::U8, 0, 256, 1),
        Operands::Symmetric => ints(x, DataType::I8, -128, 128, 1),
    });
    slots[Q::W] = In::Const(ints(w, DataType::I8, -127, 128, 2));
    slots[Q::BIAS] = match bias {
        Some(DataType::I32) => In::Const(ints(&[channels], DataType::I32, -3000, 3000, 3)),
        Some(_) => In::Const(HostTensor::from_f32(vec![channels], (0..channels).map(|k| k as f32 * 0.37 - 1.0).collect()).expect("bias")),
        None => In::Absent,
    };
    slots[Q::X_SCALE] = In::Const(scalar(DataType::F32, 0.1));
    slots[Q::X_ZERO] = In::Const(scalar(x_type, if matches!(operands, Operands::Asymmetric) { 128.0 } else { 0.0 }));
    slots[Q::W_SCALE] = In::Const(HostTensor::from_f32(vec![channels], w_scale).expect("scales"));
    if matches!(operands, Operands::Asymmetric) {
        slots[Q::W_ZERO] = In::Const(ints(&[channels], DataType::I8, -2, 3, 4));
    }
    if output != DataType::F32 {
        slots[Q::Y_SCALE] = In::Const(scalar(DataType::F32, 16.0));
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
    use Operands::{Asymmetric as A, Symmetric as S};
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        // cuDNN INT8 (NHWC) convolutions.
        ("int8 3x3 conv, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 9, 7], &[8, 16, 3, 3], 8, Some(DataType::I32), true, DataType::I8)),
        ("int8 strided 1x1 conv, float bias, uint8", layer(conv(1, &[2, 2], &[0, 0]), S, &[3, 8, 8, 8], &[12, 8, 1, 1], 12, Some(DataType::F32), false, DataType::U8)),
        ("int8 3x3 conv, float output", layer(conv(1, &[1, 1], &[1, 1]), S, &[1, 32, 6, 6], &[4, 32, 3, 3], 4, None, true, DataType::F32)),
        // 1x1 convolutions as cuBLASLt IMMA products over NHWC pixels.
        ("int8 1x1 conv, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[0, 0]), S, &[2, 32, 5, 7], &[16, 32, 1, 1], 16, Some(DataType::I32), true, DataType::I8)),
        // cuBLASLt IMMA products.
        ("int8 product, int32 bias, int8", layer(matmul.clone(), S, &[3, 5, 64], &[64, 24], 24, Some(DataType::I32), false, DataType::I8)),
        ("int8 product, B transposed, float", layer(matmul_t, S, &[7, 32], &[16, 32], 16, Some(DataType::F32), true, DataType::F32)),
        // The exact f32 fallback.
        ("int8 conv, 3 input channels", layer(conv(1, &[2, 2], &[3, 3]), S, &[2, 3, 13, 13], &[8, 3, 7, 7], 8, Some(DataType::I32), true, DataType::I8)),
        ("uint8 3x3 conv, int32 bias, ReLU, uint8", layer(conv(1, &[1, 1], &[1, 1]), A, &[2, 3, 7, 6], &[4, 3, 3, 3], 4, Some(DataType::I32), true, DataType::U8)),
        ("uint8 grouped strided conv, int8", layer(conv(2, &[2, 2], &[1, 1]), A, &[1, 4, 9, 9], &[6, 2, 3, 3], 6, None, false, DataType::I8)),
        ("uint8 1-D conv, float output, ReLU", layer(conv(1, &[1], &[1]), A, &[2, 3, 11], &[5, 3, 3], 5, Some(DataType::F32), true, DataType::F32)),
        ("uint8 product, int32 bias, uint8", layer(matmul.clone(), A, &[3, 40], &[40, 8], 8, Some(DataType::I32), false, DataType::U8)),
        ("int8 product, odd k", layer(matmul, S, &[4, 30], &[30, 8], 8, None, false, DataType::I8)),
    ];
    for (what, (net, feeds)) in cases {
        check_network(what, &net, &feeds, 0.0);
    }
}

/// onnxruntime's Q/DQ fixture (uint8 activations) builds into integer layers on cuda and gives
/// the cpu backend's integers.
#[test]
fn the_qdq_fixture_runs_as_integer_layers_and_matches_the_cpu_backend() {
    let Some(cuda) = backend() else { return };
    let path = crate::pytorch_data::repo().join("engine/onnx/tests/data/qdq_conv_matmul_u8s8/model.onnx");
    let net = kiln_onnx::import_file(&path).expect("import");
    let engine = kiln::Builder::new(cuda).build(&net, &kiln::BuilderConfig::default()).expect("cuda build");
    let integer = engine.network().layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).count();
    assert_eq!(integer, 2, "{}", engine.network().dump());
    let x = HostTensor::from_f32(vec![2, 3, 6, 6], (0..216).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 1.6).collect()).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), x)]);
    let run = |backend: &dyn kiln::Backend| {
        let engine = kiln::Builder::new(backend).build(&net, &kiln::BuilderConfig::default()).expect("build");
        kiln::ExecutionContext::new(engine, backend).expect("prepare").run(&feeds).expect("run")
    };
    let (got, want) = (run(cuda), run(&kiln_cpu::CpuBackend::new()));
    for name in ["y1", "y2"] {
        assert_eq!(got[name].data(), want[name].data(), "{name}");
    }
}
