//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on wgpu against the cpu oracle: exact
//! for integer outputs and for the float ones (the same f32 operations), on multipliers near
//! 1/2^k, where many results sit at a rounding tie.

use crate::common::{both, gpu, same_values};
use crate::integer_layers::{conv, layer, Operands::Asymmetric as A};
use kiln::{DataType, MatrixOp, QuantizedAnchor};

#[test]
fn integer_layers_match_the_cpu_oracle_exactly() {
    let Some(gpu) = gpu() else { return };
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        ("3x3 conv, int32 bias, ReLU, uint8", layer(conv(1, &[1, 1], &[1, 1]), A, &[2, 3, 7, 6], &[4, 3, 3, 3], 4, Some(DataType::I32), true, DataType::U8)),
        ("grouped strided conv, int8", layer(conv(2, &[2, 2], &[1, 1]), A, &[1, 4, 9, 9], &[6, 2, 3, 3], 6, None, false, DataType::I8)),
        ("conv, float bias, uint8", layer(conv(1, &[1, 1], &[0, 0]), A, &[2, 5, 4, 4], &[3, 5, 1, 1], 3, Some(DataType::F32), false, DataType::U8)),
        ("1-D conv, float output, ReLU", layer(conv(1, &[1], &[1]), A, &[2, 3, 11], &[5, 3, 3], 5, Some(DataType::F32), true, DataType::F32)),
        ("product, int32 bias, uint8", layer(matmul, A, &[3, 40], &[40, 8], 8, Some(DataType::I32), false, DataType::U8)),
        ("batched product, B transposed, float", layer(matmul_t, A, &[2, 5, 24], &[6, 24], 6, None, true, DataType::F32)),
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
    crate::integer_layers::check_qdq_fixture(&gpu);
}
