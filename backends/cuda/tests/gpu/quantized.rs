//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on cuda against the cpu oracle, value for
//! value: symmetric int8 layers on the INT8 tensor-core paths (kiln's implicit-GEMM convolution,
//! cuBLASLt IMMA for products and 1x1 convolutions, cuDNN's INT8 convolution), the others
//! (uint8 with zero points, grouped or 1-D convolutions) on the exact f32 fallback; multipliers
//! near 1/2^k put many results at a rounding tie.

use crate::common::{backend, check_network, last_layer, run_with_tactic};
use crate::integer_layers::{conv, layer, Operands};
use kiln::{Backend, ConvolutionParams, DataType, MathMode, MatrixOp, QuantizedAnchor};

/// A convolution anchor with its own padding at each end and dilation.
fn conv_padded(strides: &[usize], pre: &[usize], post: &[usize], dilations: &[usize]) -> QuantizedAnchor {
    QuantizedAnchor::Convolution(ConvolutionParams { groups: 1, strides: strides.to_vec(), dilations: dilations.to_vec(), pre_padding: pre.to_vec(), post_padding: post.to_vec() })
}

/// Both tactics of symmetric int8 convolutions (kiln's kernel with the epilogue fused, and the
/// libraries' sums with the epilogue kernel) give the cpu oracle's values, over the sizes the
/// kernel's tiles meet: pixels and filters that do not fill a block, channel counts that are
/// not a multiple of its 64-channel step (copies across filter taps) or of 16 (padded),
/// strides, dilations and uneven padding; each tactic can be timed with the layer's constants.
#[test]
fn both_int8_convolution_tactics_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use Operands::Symmetric as S;
    let cases = [
        ("3x3, 16 channels, 8 filters, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 9, 7], &[8, 16, 3, 3], 8, Some(DataType::I32), true, DataType::I8)),
        ("3x3 stride 2, 48 channels, 100 filters, float bias, uint8", layer(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, Some(DataType::F32), false, DataType::U8)),
        ("3x3 dilation 2, uneven padding, 32 channels, 64 filters, f32", layer(conv_padded(&[1, 1], &[0, 2], &[2, 1], &[2, 2]), S, &[2, 32, 12, 15], &[64, 32, 3, 3], 64, None, true, DataType::F32)),
        ("1x1, 64 channels, 256 filters, int32 bias, int8", layer(conv(1, &[1, 1], &[0, 0]), S, &[2, 64, 7, 7], &[256, 64, 1, 1], 256, Some(DataType::I32), false, DataType::I8)),
        ("5x2, 16 channels, 136 filters, 300 pixels, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[2, 0]), S, &[3, 16, 10, 11], &[136, 16, 5, 2], 136, Some(DataType::I32), true, DataType::I8)),
        // Channels zero-padded to 16 and 32 for kiln's kernel: an RGB stem, and 24 channels.
        ("7x7 stride 2 stem, 3 channels, 64 filters, int32 bias, ReLU, int8", layer(conv(1, &[2, 2], &[3, 3]), S, &[2, 3, 23, 20], &[64, 3, 7, 7], 64, Some(DataType::I32), true, DataType::I8)),
        ("3x3, 24 channels, 40 filters, f32", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 24, 9, 9], &[40, 24, 3, 3], 40, None, false, DataType::F32)),
    ];
    for (what, (net, feeds)) in cases {
        let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
        let layer = last_layer(&net);
        let tactics = cuda.tactics(&net, layer, MathMode::EXACT);
        let names: Vec<String> = tactics.iter().map(|t| t.id.name.clone()).collect();
        assert_eq!(names, ["int8_conv_implicit_gemm", "int8_conv_library_sums"], "{what}");
        for t in &tactics {
            let got = run_with_tactic(cuda, &net, &feeds, layer, &t.id, what);
            assert_eq!(got[0].data(), want[0].data(), "{what} with {}", t.id.name);
            let time = cuda.time_tactic(&net, layer, t, MathMode::EXACT, 3).unwrap_or_else(|e| panic!("{what}: timing {}: {e}", t.id.name));
            assert!(time.as_nanos() > 0, "{what}: {} timed at 0", t.id.name);
        }
    }
}

#[test]
fn integer_layers_match_the_cpu_oracle_exactly() {
    use Operands::{Asymmetric as A, Symmetric as S};
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        // Convolutions: kiln's INT8 kernel, the tactic an untimed build runs (16+ channels).
        ("int8 3x3 conv, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 9, 7], &[8, 16, 3, 3], 8, Some(DataType::I32), true, DataType::I8)),
        ("int8 strided 1x1 conv, float bias, uint8", layer(conv(1, &[2, 2], &[0, 0]), S, &[3, 8, 8, 8], &[12, 8, 1, 1], 12, Some(DataType::F32), false, DataType::U8)),
        ("int8 3x3 conv, float output", layer(conv(1, &[1, 1], &[1, 1]), S, &[1, 32, 6, 6], &[4, 32, 3, 3], 4, None, true, DataType::F32)),
        // A 1x1 convolution (kiln's kernel here; cuBLASLt IMMA over NHWC pixels as the other tactic).
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
    crate::integer_layers::check_qdq_fixture(cuda);
}
