//! The network-definition API: shape/type inference and eager validation errors.

use kiln::*;

fn conv_net() -> (Network, TensorId) {
    let mut net = Network::new("t");
    let x = net.add_input("x", DataType::F32, [1, 3, 8, 8]).unwrap();
    (net, x)
}

#[test]
fn convolution_and_pooling_shapes_follow_params() {
    let (mut net, x) = conv_net();
    let conv = net.add_convolution(x, 4, &[3, 3], TensorData::F32(vec![0.1; 4 * 3 * 9]), None).unwrap();
    assert_eq!(net.tensor(net.output(conv, 0)).shape, Shape::fixed(&[1, 4, 6, 6]));
    let params = ConvolutionParams {
        groups: 1,
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pre_padding: vec![1, 1],
        post_padding: vec![1, 1],
    };
    net.set_convolution_params(conv, params).unwrap();
    assert_eq!(net.tensor(net.output(conv, 0)).shape, Shape::fixed(&[1, 4, 4, 4]));
    let pool = net.add_pooling(net.output(conv, 0), PoolingKind::Max, &[2, 2]).unwrap();
    assert_eq!(net.tensor(net.output(pool, 0)).shape, Shape::fixed(&[1, 4, 3, 3]));
}

#[test]
fn params_cannot_change_after_the_output_is_used() {
    let (mut net, x) = conv_net();
    let pool = net.add_pooling(x, PoolingKind::Average, &[2, 2]).unwrap();
    net.add_activation(net.output(pool, 0), ActivationKind::Relu).unwrap();
    let mut params = match &net.layer(pool).kind {
        LayerKind::Pooling(p) => p.clone(),
        _ => unreachable!(),
    };
    params.strides = vec![2, 2];
    let err = net.set_pooling_params(pool, params).unwrap_err().to_string();
    assert!(err.contains("only before the layer's output is used"), "{err}");
}

#[test]
fn channel_mismatch_names_layer_tensor_and_rule() {
    let mut net = Network::new("t");
    let x = net.add_input("image", DataType::F32, [1, 3, 8, 8]).unwrap();
    let w = net.add_constant(&[4, 2, 3, 3], TensorData::F32(vec![0.0; 72])).unwrap();
    let w = net.output(w, 0);
    let params = ConvolutionParams {
        groups: 1,
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pre_padding: vec![0, 0],
        post_padding: vec![0, 0],
    };
    let err = net.add_layer("conv1", LayerKind::Convolution(params), vec![Some(x), Some(w)]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("layer `conv1`"), "{text}");
    assert!(text.contains("input has 3 channels but the kernel expects 2"), "{text}");
    assert!(matches!(err, NetworkError::Layer { .. }));
}

#[test]
fn elementwise_broadcasting_and_errors() {
    let mut net = Network::new("t");
    let a = net.add_input("a", DataType::F32, [1, 4, 5]).unwrap();
    let b = net.add_input("b", DataType::F32, [3, 1, 5]).unwrap();
    let c = net.add_input("c", DataType::F32, [3, 2, 5]).unwrap();
    let i = net.add_input("i", DataType::I32, [5]).unwrap();
    let sum = net.add_elementwise(a, b, ElementwiseOp::Sum).unwrap();
    assert_eq!(net.tensor(net.output(sum, 0)).shape, Shape::fixed(&[3, 4, 5]));
    let less = net.add_elementwise(a, b, ElementwiseOp::Less).unwrap();
    assert_eq!(net.tensor(net.output(less, 0)).dtype, DataType::Bool);
    let err = net.add_elementwise(a, c, ElementwiseOp::Sum).unwrap_err().to_string();
    assert!(err.contains("do not broadcast"), "{err}");
    let err = net.add_elementwise(a, i, ElementwiseOp::Prod).unwrap_err().to_string();
    assert!(err.contains("same type"), "{err}");
}

#[test]
fn empty_tensors_follow_the_general_rules() {
    // Seed §6.10: a zero-length dim behaves like any other length.
    let mut net = Network::new("t");
    let a = net.add_input("a", DataType::F32, [2, 0, 3]).unwrap();
    let b = net.add_input("b", DataType::F32, [2, 4, 3]).unwrap();
    let cat = net.add_concatenation(&[a, b], 1).unwrap();
    assert_eq!(net.tensor(net.output(cat, 0)).shape, Shape::fixed(&[2, 4, 3]));
    let c = net.add_input("c", DataType::F32, [1, 0, 1]).unwrap();
    let d = net.add_input("d", DataType::F32, [5, 1, 3]).unwrap();
    let sum = net.add_elementwise(c, d, ElementwiseOp::Sum).unwrap();
    assert_eq!(net.tensor(net.output(sum, 0)).shape, Shape::fixed(&[5, 0, 3]));
}

#[test]
fn matrix_multiply_ops_and_batch_broadcast() {
    let mut net = Network::new("t");
    let a = net.add_input("a", DataType::F32, [2, 1, 3, 4]).unwrap();
    let b = net.add_input("b", DataType::F32, [5, 6, 4]).unwrap();
    let v = net.add_input("v", DataType::F32, [4]).unwrap();
    let mm = net.add_matrix_multiply(a, MatrixOp::None, b, MatrixOp::Transpose).unwrap();
    assert_eq!(net.tensor(net.output(mm, 0)).shape, Shape::fixed(&[2, 5, 3, 6]));
    let mv = net.add_matrix_multiply(a, MatrixOp::None, v, MatrixOp::Vector).unwrap();
    assert_eq!(net.tensor(net.output(mv, 0)).shape, Shape::fixed(&[2, 1, 3]));
    let err = net.add_matrix_multiply(a, MatrixOp::None, b, MatrixOp::None).unwrap_err().to_string();
    assert!(err.contains("inner dimensions differ"), "{err}");
}

#[test]
fn symbolic_dims_propagate_and_reshape_infers() {
    let mut net = Network::new("t");
    let x = net.add_input("x", DataType::F32, Shape(vec![Dim::Named("N".into()), Dim::Fixed(3), Dim::Fixed(4)])).unwrap();
    let r = net.add_reshape(x, &[0, -1]).unwrap();
    assert_eq!(net.tensor(net.output(r, 0)).shape, Shape(vec![Dim::Named("N".into()), Dim::Fixed(12)]));
    let shape = net.add_shape(x).unwrap();
    let s = net.tensor(net.output(shape, 0));
    assert_eq!((s.dtype, s.shape.clone()), (DataType::I64, Shape::fixed(&[3])));
    assert!(s.value.is_none(), "the shape of a dynamic tensor is not known at build time");
    let err = net.add_reshape(x, &[5, -1, -1]).unwrap_err().to_string();
    assert!(err.contains("more than one -1"), "{err}");
}

#[test]
fn constant_shapes_fold_through_shape_layers() {
    let mut net = Network::new("t");
    let x = net.add_input("x", DataType::F32, [2, 3]).unwrap();
    let shape = net.add_shape(x).unwrap();
    let v = net.tensor(net.output(shape, 0)).value.clone().expect("fixed shape is known");
    assert_eq!(v.to_i64_vec().unwrap(), vec![2, 3]);
    let fill = net
        .add_layer("zeros", LayerKind::Fill { value: HostTensor::scalar(TensorData::F32(vec![0.0])).unwrap() }, vec![Some(net.output(shape, 0))])
        .unwrap();
    assert_eq!(net.tensor(net.output(fill, 0)).shape, Shape::fixed(&[2, 3]));
}

#[test]
fn slice_follows_onnx_clamping() {
    let mut net = Network::new("t");
    let x = net.add_input("x", DataType::F32, [10, 6]).unwrap();
    let s = net.add_slice(x, &[-3, 100], &[i64::MAX, -100], &[0, 1], &[1, -2]).unwrap();
    assert_eq!(net.tensor(net.output(s, 0)).shape, Shape::fixed(&[3, 3]));
}

#[test]
fn duplicate_names_and_missing_outputs_are_rejected() {
    let mut net = Network::new("t");
    net.add_input("x", DataType::F32, [1]).unwrap();
    assert!(matches!(net.add_input("x", DataType::F32, [1]), Err(NetworkError::DuplicateTensorName { .. })));
    assert_eq!(net.validate(), Err(NetworkError::NoOutputs));
}

#[test]
fn dump_lists_inputs_layers_and_outputs() {
    let mut net = Network::new("tiny");
    let x = net.add_input("x", DataType::F16, Shape(vec![Dim::Named("N".into()), Dim::Fixed(4)])).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.set_layer_name(relu, "relu1");
    net.set_tensor_name(net.output(relu, 0), "y").unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    let dump = net.dump();
    let expected = "network `tiny`: 1 inputs, 1 outputs, 1 layers, 0 weights blobs\n\
                    input  `x`: f16[N,4] LINEAR\n\
                    [0] `relu1` Activation {Activation { kind: Relu }} (`x`) -> `y`: f16[N,4]\n\
                    output `y`: f16[N,4] LINEAR\n";
    assert_eq!(dump, expected);
}

/// `softmax(Q·Kᵀ / √8) · V` with no levels: the attention tests' starting point.
fn attention_over_8_dims() -> AttentionParams {
    AttentionParams {
        scale: 8f32.sqrt(),
        key_transposed: false,
        scale_multiplies: false,
        zero_nan_rows: false,
        product_levels: None,
        scores_levels: None,
        probs_levels: None,
        input_levels: None,
        output_levels: None,
    }
}

/// The output type of an attention layer with `params` over Q, K and V `[1, 2, 4, 8]` of
/// `types`, or the network's refusal.
fn attention_output_type(types: [DataType; 3], params: AttentionParams) -> Result<DataType, String> {
    let mut net = Network::new("t");
    let inputs: Vec<_> = ["q", "k", "v"].iter().zip(types).map(|(n, t)| Some(net.add_input(n, t, [1, 2, 4, 8]).unwrap())).collect();
    let layer = net.add_layer("attention", LayerKind::Attention(params), inputs).map_err(|e| e.to_string())?;
    Ok(net.tensor(net.output(layer, 0)).dtype)
}

/// An attention layer's level grids are a QuantizeLinear's: int8 or uint8 levels, a zero point
/// among them and a positive scale. Anything else (an engine file may say anything) is refused
/// with what is wrong.
#[test]
fn attention_level_grids_must_be_8_bit_quantizations() {
    let attention = |grid: LevelGrid| {
        let params = AttentionParams { probs_levels: Some(grid), ..attention_over_8_dims() };
        attention_output_type([DataType::F32; 3], params).map(|_| ())
    };
    assert_eq!(attention(LevelGrid { scale: 1.0 / 127.0, zero: 0, levels: DataType::I8 }), Ok(()));
    assert_eq!(attention(LevelGrid { scale: 1.0 / 255.0, zero: 0, levels: DataType::U8 }), Ok(()));
    for (grid, says) in [
        (LevelGrid { scale: 0.1, zero: 0, levels: DataType::F32 }, "f32"),
        (LevelGrid { scale: 0.1, zero: 300, levels: DataType::U8 }, "zero point 300"),
        (LevelGrid { scale: 0.1, zero: -1, levels: DataType::U8 }, "zero point -1"),
        (LevelGrid { scale: 0.0, zero: 0, levels: DataType::I8 }, "scale 0"),
        (LevelGrid { scale: f32::NAN, zero: 0, levels: DataType::I8 }, "scale NaN"),
    ] {
        let err = attention(grid).expect_err(says);
        assert!(err.contains("probabilities levels") && err.contains(says), "{says}: {err}");
    }
}

/// An attention writing its output's levels (a folded per-tensor QuantizeLinear) outputs the
/// grid's integer type, and its grid is refused as the others are.
#[test]
fn attention_output_levels_make_the_output_their_integers() {
    let attention = |grid: LevelGrid| attention_output_type([DataType::F16; 3], AttentionParams { output_levels: Some(grid), ..attention_over_8_dims() });
    assert_eq!(attention(LevelGrid { scale: 0.05, zero: 0, levels: DataType::I8 }), Ok(DataType::I8));
    assert_eq!(attention(LevelGrid { scale: 0.05, zero: 128, levels: DataType::U8 }), Ok(DataType::U8));
    let err = attention(LevelGrid { scale: -1.0, zero: 0, levels: DataType::I8 }).expect_err("a negative scale");
    assert!(err.contains("the output levels") && err.contains("scale -1"), "{err}");
}

/// Q, K and V given as levels (a folded per-tensor DequantizeLinear each): each must be the
/// levels its grid names, the others of the float type they dequantize to, and the grids
/// QuantizeLinear's; the output is that float type.
#[test]
fn attention_input_levels_must_match_their_grids_and_dequantize_to_a_float() {
    let grid = |levels| Some(LevelGrid { scale: 0.05, zero: 0, levels });
    let attention = |types: [DataType; 3], grids: [Option<LevelGrid>; 3], to: DataType| {
        attention_output_type(types, AttentionParams { input_levels: Some(InputLevels { grids, to }), ..attention_over_8_dims() })
    };
    use DataType::{F16, F32, I32, I8, U8};
    assert_eq!(attention([I8, I8, U8], [grid(I8), grid(I8), grid(U8)], F16), Ok(F16));
    assert_eq!(attention([I8, F32, I8], [grid(I8), None, grid(I8)], F32), Ok(F32));
    for (types, grids, to, says) in [
        ([U8, I8, I8], [grid(I8), grid(I8), grid(I8)], F32, "input 0 must be the i8 levels"),
        ([I8, F16, I8], [grid(I8), None, grid(I8)], F32, "input 1 must be f32"),
        ([I8, I8, I8], [grid(I8), grid(I8), grid(I8)], I32, "not a floating-point type"),
        ([I8, I8, U8], [grid(I8), grid(I8), Some(LevelGrid { scale: 0.05, zero: 300, levels: U8 })], F32, "the V input's levels"),
    ] {
        let err = attention(types, grids, to).expect_err(says);
        assert!(err.contains(says), "{says}: {err}");
    }
}

/// A fused layer's reduction ([`PostOp::Reduce`]) shapes its output as the Reduce layer it stands
/// for, only as the last step of a pointwise island; elsewhere the rule is named.
#[test]
fn a_fused_reduction_ends_a_pointwise_island() {
    let build = |anchor: FusedAnchor, anchor_inputs: usize, epilogue: Vec<PostOp>| {
        let mut net = Network::new("island");
        let a = net.add_input("a", DataType::F32, Shape::fixed(&[2, 8, 5, 5])).unwrap();
        let b = net.add_input("b", DataType::F32, Shape::fixed(&[2, 8, 5, 5])).unwrap();
        let inputs = if anchor_inputs == 2 { vec![Some(a), Some(b)] } else { vec![Some(a)] };
        net.add_layer("island", LayerKind::Fused(FusedParams::new(anchor, anchor_inputs, epilogue)), inputs)
            .map(|l| net.tensor(net.output(l, 0)).shape.to_string())
            .map_err(|e| e.to_string())
    };
    let pool = |keep_dims| PostOp::Reduce { op: ReduceOp::Mean, axes: AxisMask::of(&[2, 3]).unwrap(), keep_dims };
    let relu = PostOp::Activation(ActivationKind::Relu);
    assert_eq!(build(FusedAnchor::Elementwise(ElementwiseOp::Sum), 2, vec![relu, pool(true)]).unwrap(), Shape::fixed(&[2, 8, 1, 1]).to_string());
    assert_eq!(build(FusedAnchor::Activation(ActivationKind::Relu), 1, vec![pool(false)]).unwrap(), Shape::fixed(&[2, 8]).to_string());
    let err = build(FusedAnchor::Elementwise(ElementwiseOp::Sum), 2, vec![pool(true), relu]).unwrap_err();
    assert!(err.contains("only the last step may"), "{err}");
    let conv = ConvolutionParams { groups: 1, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![0, 0], post_padding: vec![0, 0] };
    let err = build(FusedAnchor::Convolution(conv), 2, vec![pool(true)]).unwrap_err();
    assert!(err.contains("only a pointwise island's may"), "{err}");
    let far = PostOp::Reduce { op: ReduceOp::Sum, axes: AxisMask(1 << 7), keep_dims: true };
    assert!(build(FusedAnchor::Activation(ActivationKind::Relu), 1, vec![far]).is_err(), "an axis past the rank");
    assert_eq!(AxisMask::of(&[2, 40]), None);
    assert_eq!(AxisMask(0b1100).axes(), vec![2, 3]);
    assert_eq!(format!("{:?}", pool(true)), "Reduce { op: Mean, axes: [2, 3], keep_dims: true }");
}
