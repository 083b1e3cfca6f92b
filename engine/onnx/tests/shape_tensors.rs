//! Shape tensors computed in the graph keep their length and their known elements: the
//! `Shape → Gather/Slice → Concat → Reshape` chains PyTorch's exporters write, with static
//! and with dynamic dims (symbolic shape propagation).

mod common;

use common::*;
use kiln::Dim;
use kiln_onnx::proto::ModelProto;

fn output_dims(model: &ModelProto) -> Vec<Dim> {
    let net = import(model);
    net.tensor(net.outputs()[0]).shape.dims().to_vec()
}

fn named(n: &str) -> Dim {
    Dim::Named(n.into())
}

/// torchvision's `nn.MultiheadAttention` through the legacy exporter: the in-projection is
/// unflattened by `Reshape(x, Concat(Slice(Shape(x), 0, -1 mod 3), [3, E], Slice(...)))`, whose
/// slice bounds come from `Mod` and `Add` of constants.
fn mha_unflatten(dims: &str) -> ModelProto {
    Graph::new()
        .input("x", F32, dims)
        .init(tensor_i64("neg_one", &[], &[-1]))
        .init(tensor_i64("rank", &[], &[3]))
        .init(tensor_i64("one_d", &[1], &[1]))
        .init(tensor_i64("one", &[], &[1]))
        .init(tensor_i64("three_e", &[2], &[3, 4]))
        .init(tensor_i64("big", &[1], &[i64::MAX]))
        .init(tensor_i64("zero", &[1], &[0]))
        .node(node("Shape", &["x"], &["shape"]))
        .node(node("Mod", &["neg_one", "rank"], &["last"])) // -1 mod 3 = 2 (sign of the divisor)
        .node(node("Reshape", &["last", "one_d"], &["last_1d"]))
        .node(node("Slice", &["shape", "zero", "last_1d"], &["head"]))
        .node(node("Add", &["last", "one"], &["after"]))
        .node(node("Reshape", &["after", "one_d"], &["after_1d"]))
        .node(node("Slice", &["shape", "after_1d", "big"], &["tail"]))
        .node(node("Concat", &["head", "three_e", "tail"], &["dims"]).int("axis", 0))
        .node(node("Reshape", &["x", "dims"], &["y"]))
        .output("y")
        .model(17)
}

#[test]
fn slice_bounds_from_mod_fold_and_the_reshape_rank_is_known() {
    // Static: every dim known.
    assert_eq!(output_dims(&mha_unflatten("5,2,12")), [Dim::Fixed(5), Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)]);
    // Dynamic batch: the named dim travels through Shape, Slice and Concat.
    let dynamic = mha_unflatten("S,N,12");
    assert_eq!(output_dims(&dynamic), [named("S"), named("N"), Dim::Fixed(3), Dim::Fixed(4)]);
    let y = run(&dynamic, vec![("x", iota(&[5, 2, 12]))], "y");
    assert_eq!(y.shape(), &[5, 2, 3, 4]);
}

#[test]
fn gathered_dims_keep_their_names_through_arithmetic() {
    // [N, C, H, W] → [N, C*H*W] the way the legacy exporter writes `x.view(x.size(0), -1)`,
    // and [N, H*W, C] as ViT's patch flattening does.
    let model = Graph::new()
        .input("x", F32, "N,8,4,4")
        .init(tensor_i64("i0", &[], &[0]))
        .init(tensor_i64("i1", &[], &[1]))
        .init(tensor_i64("axes", &[1], &[0]))
        .init(tensor_i64("minus_one", &[1], &[-1]))
        .node(node("Shape", &["x"], &["shape"]))
        .node(node("Gather", &["shape", "i0"], &["n"]).int("axis", 0))
        .node(node("Gather", &["shape", "i1"], &["c"]).int("axis", 0))
        .node(node("Mul", &["n", "i1"], &["n_times_one"]))
        .node(node("Unsqueeze", &["n_times_one", "axes"], &["n_1d"]))
        .node(node("Unsqueeze", &["c", "axes"], &["c_1d"]))
        .node(node("Concat", &["n_1d", "c_1d", "minus_one"], &["dims"]).int("axis", 0))
        .node(node("Reshape", &["x", "dims"], &["y"]))
        .output("y")
        .model(17);
    assert_eq!(output_dims(&model), [named("N"), Dim::Fixed(8), Dim::Fixed(16)]);
    let y = run(&model, vec![("x", iota(&[3, 8, 4, 4]))], "y");
    assert_eq!(y.shape(), &[3, 8, 16]);
}

#[test]
fn expand_and_constant_of_shape_take_named_dims() {
    // `class_token.expand(x.shape[0], -1, -1)`: Where(Equal(dims, -1), ones, dims).
    let model = Graph::new()
        .input("x", F32, "N,4,6")
        .init(tensor_f32("token", &[1, 1, 6], &[1.0; 6]))
        .init(tensor_i64("i0", &[1], &[0]))
        .init(tensor_i64("rest", &[2], &[-1, -1]))
        .init(tensor_i64("minus_one", &[3], &[-1, -1, -1]))
        .init(tensor_i64("ones", &[3], &[1, 1, 1]))
        .node(node("Shape", &["x"], &["shape"]))
        .node(node("Gather", &["shape", "i0"], &["n"]).int("axis", 0))
        .node(node("Concat", &["n", "rest"], &["wanted"]).int("axis", 0))
        .node(node("Equal", &["wanted", "minus_one"], &["is_free"]))
        .node(node("Where", &["is_free", "ones", "wanted"], &["target"]))
        .node(node("Expand", &["token", "target"], &["tokens"]))
        .node(node("Concat", &["tokens", "x"], &["y"]).int("axis", 1))
        .output("y")
        .model(17);
    // A dim is never -1, so `Equal` is known and the token is expanded to the named batch.
    assert_eq!(output_dims(&model), [named("N"), Dim::Fixed(5), Dim::Fixed(6)]);
    let y = run(&model, vec![("x", iota(&[2, 4, 6]))], "y");
    assert_eq!(y.shape(), &[2, 5, 6]);

    let fill = Graph::new()
        .input("x", F32, "N,3")
        .init(tensor_i64("tail", &[1], &[7]))
        .node(node("Shape", &["x"], &["shape"]))
        .node(node("Slice", &["shape", "zero", "one"], &["n"]))
        .init(tensor_i64("zero", &[1], &[0]))
        .init(tensor_i64("one", &[1], &[1]))
        .node(node("Concat", &["n", "tail"], &["dims"]).int("axis", 0))
        .node(node("ConstantOfShape", &["dims"], &["y"]))
        .output("y")
        .model(17);
    assert_eq!(output_dims(&fill), [named("N"), Dim::Fixed(7)]);
}

#[test]
fn static_mask_arithmetic_folds_to_constants() {
    // Comparisons, Where and Not over constants fold at import, so a static export's shape
    // plumbing leaves no layers behind.
    let model = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_i64("dims", &[2], &[-1, 3]))
        .init(tensor_i64("minus_one", &[2], &[-1, -1]))
        .init(tensor_i64("fallback", &[2], &[2, 1]))
        .node(node("Equal", &["dims", "minus_one"], &["free"]))
        .node(node("Not", &["free"], &["fixed"]))
        .node(node("Where", &["fixed", "dims", "fallback"], &["target"]))
        .node(node("Expand", &["x", "target"], &["y"]))
        .output("y")
        .model(17);
    let net = import(&model);
    let target = net.tensor(net.find_tensor("target").expect("target tensor"));
    assert_eq!(target.value.as_ref().and_then(|v| v.to_i64_vec()), Some(vec![2, 3]));
    assert_eq!(output_dims(&model), [Dim::Fixed(2), Dim::Fixed(3)]);
}
