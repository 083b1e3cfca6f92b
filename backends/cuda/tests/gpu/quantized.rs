//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on cuda against the cpu oracle, value for
//! value: symmetric int8 layers on the INT8 tensor-core paths (cuBLASLt IMMA for products and
//! 1x1 convolutions, cuDNN's INT8 convolution), the others (uint8 with zero points, grouped or 1-D convolutions) on the exact
//! f32 fallback; multipliers near 1/2^k put many results at a rounding tie.

use crate::common::{backend, check_network};
use crate::integer_layers::{conv, layer, Operands};
use kiln::{DataType, MatrixOp, QuantizedAnchor};

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
    crate::integer_layers::check_qdq_fixture(cuda);
}
