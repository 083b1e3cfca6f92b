//! ONNX MatMulInteger and ConvInteger (what onnxruntime's `quantize_dynamic` writes): the
//! importer's exact f64 expansion becomes one integer layer ending in its int32 sums where the
//! backend runs integer layers, and gives the integer arithmetic's values either way.

mod common;
use common::*;
use kiln::{Backend, BuilderConfig, DataType, HostTensor, LayerKind, Network, TensorData};

const U8: i32 = 2;
const I8: i32 = 3;

fn bytes(name: &str, dims: &[i64], data_type: i32, values: &[i32]) -> kiln_onnx::proto::TensorProto {
    tensor_raw(name, dims, data_type, values.iter().map(|&v| v as u8).collect())
}

fn u8s(shape: &[usize], f: impl Fn(usize) -> u8) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::U8((0..shape.iter().product()).map(f).collect())).expect("u8")
}

/// The built network's integer layers, and whether any f64 layer is left.
fn built(net: &Network) -> (Vec<kiln::QuantizedParams>, bool) {
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend).build(net, &BuilderConfig::default()).expect("build");
    let built = engine.network();
    let integer = built.layers().iter().filter_map(|l| if let LayerKind::Quantized(p) = &l.kind { Some(p.clone()) } else { None }).collect();
    let f64_left = built.layers().iter().any(|l| l.outputs.iter().any(|&t| built.tensor(t).dtype == DataType::F64));
    (integer, f64_left)
}

/// The network as imported (the f64 expansion), run without the builder's passes.
fn as_imported(net: &Network, inputs: &[HostTensor]) -> HostTensor {
    kiln_cpu::CpuBackend::new().prepare(net).expect("prepare").execute(inputs).expect("run").remove(0)
}

/// `A` u8 [4, 40] (zero point `a_zero`, one value or one per row) by `B` i8 [40, 24] with one
/// zero point per column.
fn matmul_integer(a_zero: &[i32]) -> Network {
    let b: Vec<i32> = (0..40 * 24).map(|i| (i as i32 * 53 % 255) - 127).collect();
    let b_zero: Vec<i32> = (0..24).map(|j| j as i32 % 5 - 2).collect();
    let a_zero_dims: Vec<i64> = if a_zero.len() == 1 { vec![] } else { vec![a_zero.len() as i64] };
    let model = Graph::new()
        .input("A", U8, "4,40")
        .init(bytes("a_zero", &a_zero_dims, U8, a_zero))
        .init(bytes("B", &[40, 24], I8, &b))
        .init(bytes("b_zero", &[24], I8, &b_zero))
        .node(node("MatMulInteger", &["A", "B", "a_zero", "b_zero"], &["Y"]))
        .output("Y")
        .model(13);
    import(&model)
}

fn reference_matmul(a: &HostTensor, a_zero: &[i32]) -> Vec<i64> {
    let a = a.to_f64_vec();
    let b: Vec<i64> = (0..40 * 24).map(|i| (i as i64 * 53 % 255) - 127).collect();
    let mut y = vec![0i64; 4 * 24];
    for r in 0..4 {
        let za = a_zero[if a_zero.len() == 1 { 0 } else { r }] as i64;
        for c in 0..24 {
            let zb = c as i64 % 5 - 2;
            y[r * 24 + c] = (0..40).map(|k| (a[r * 40 + k] as i64 - za) * (b[k * 24 + c] - zb)).sum();
        }
    }
    y
}

#[test]
fn a_matmul_integer_becomes_one_integer_layer_of_int32_sums() {
    let net = matmul_integer(&[131]);
    let (integer, f64_left) = built(&net);
    assert_eq!(integer.len(), 1, "{}", net.dump());
    assert_eq!(integer[0].output, DataType::I32);
    assert!(!f64_left, "the f64 expansion is gone");
    let a = u8s(&[4, 40], |i| (i * 97 % 256) as u8);
    let got = run_network(&net, vec![("A", a.clone())]).remove("Y").expect("Y");
    assert_eq!(got.dtype(), DataType::I32);
    assert_eq!(got.to_i64_vec().expect("ints"), reference_matmul(&a, &[131]));
    assert_eq!(got.data(), as_imported(&net, &[a]).data());
}

/// MatMulInteger's per-row zero point of A has no integer-layer form: the expansion stays,
/// and is still exact.
#[test]
fn a_per_row_zero_point_keeps_the_exact_expansion() {
    let zeros = [120, 7, 255, 0];
    let net = matmul_integer(&zeros);
    let (integer, f64_left) = built(&net);
    assert!(integer.is_empty() && f64_left);
    let a = u8s(&[4, 40], |i| (i * 31 % 256) as u8);
    let got = run_network(&net, vec![("A", a.clone())]).remove("Y").expect("Y");
    assert_eq!(got.to_i64_vec().expect("ints"), reference_matmul(&a, &zeros));
}

/// ConvInteger with a per-output-channel weight zero point (reshaped by the importer to
/// broadcast along the filters) and padding.
#[test]
fn a_conv_integer_with_per_channel_weight_zero_points_becomes_one_integer_layer() {
    let w: Vec<i32> = (0..4 * 3 * 3 * 3).map(|i| i as i32 * 71 % 256).collect();
    let model = Graph::new()
        .input("x", U8, "2,3,5,6")
        .init(bytes("x_zero", &[], U8, &[100]))
        .init(bytes("w", &[4, 3, 3, 3], U8, &w))
        .init(bytes("w_zero", &[4], U8, &[0, 3, 250, 128]))
        .node(node("ConvInteger", &["x", "w", "x_zero", "w_zero"], &["y"]).ints("pads", &[1, 1, 1, 1]))
        .output("y")
        .model(13);
    let net = import(&model);
    let (integer, f64_left) = built(&net);
    assert_eq!(integer.len(), 1, "{}", net.dump());
    assert!(!f64_left);
    let x = u8s(&[2, 3, 5, 6], |i| (i * 59 % 256) as u8);
    let got = run_network(&net, vec![("x", x.clone())]).remove("y").expect("y");
    assert_eq!(got.dtype(), DataType::I32);
    assert_eq!(got.data(), as_imported(&net, &[x]).data());
}
