#!/usr/bin/env python3
"""Generates the reference cases under tests/data/<case>/ (ONNX test-data layout:
model.onnx, input_<i>.pb, output_<i>.pb), with expected outputs from onnxruntime, or from
the ONNX reference evaluator where onnxruntime has no kernel for an old opset.

Run from this directory with a Python that has onnx, numpy and onnxruntime:
    python generate.py
The Rust tests only read the files; they never need Python.
"""

import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(1234)
CASES = []

NP_TO_ONNX = {
    np.dtype("float32"): TensorProto.FLOAT,
    np.dtype("float64"): TensorProto.DOUBLE,
    np.dtype("float16"): TensorProto.FLOAT16,
    np.dtype("int32"): TensorProto.INT32,
    np.dtype("int64"): TensorProto.INT64,
    np.dtype("int8"): TensorProto.INT8,
    np.dtype("uint8"): TensorProto.UINT8,
    np.dtype("bool"): TensorProto.BOOL,
}


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def ints(values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def case(name, nodes, inputs, opset, inits=None, outputs=("y",), dims=None, reference=False, expected=None,
         domains=None, ort_agrees=False):
    """`inputs`: list of (name, array); `inits`: dict of initializers; `dims`: optional
    per-input declared dims overriding the array shape (strings are symbolic);
    `reference`: skip onnxruntime; `expected`: numpy function of the feeds for semantics
    that neither runtime implements any more (pre-opset-7 broadcasting); `domains`: extra
    opset imports {domain: version}; `ort_agrees`: onnxruntime must give exactly what
    `expected` gives (checked here)."""
    CASES.append(dict(name=name, nodes=nodes, inputs=inputs, opset=opset, inits=inits or {},
                      outputs=list(outputs), dims=dims or {}, reference=reference, expected=expected,
                      domains=domains or {}, ort_agrees=ort_agrees))


def build(c):
    graph_inputs = []
    for name, array in c["inputs"]:
        shape = c["dims"].get(name, list(array.shape))
        graph_inputs.append(helper.make_tensor_value_info(name, NP_TO_ONNX[array.dtype], shape))
    inits = [numpy_helper.from_array(v, k) for k, v in c["inits"].items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in c["outputs"]]
    graph = helper.make_graph(c["nodes"], c["name"], graph_inputs, outs, inits)
    ir = 8 if c["opset"] >= 9 else 3
    if c["opset"] >= 27:
        ir = 13
    imports = [helper.make_opsetid("", c["opset"])] + [helper.make_opsetid(d, v) for d, v in c["domains"].items()]
    model = helper.make_model(graph, opset_imports=imports, ir_version=ir)
    # Fill in output types so that every runtime accepts the model.
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        info = known.get(out.name)
        if info is not None and info.type.tensor_type.elem_type:
            out.type.tensor_type.elem_type = info.type.tensor_type.elem_type
    return model


def evaluate(model, c):
    feeds = {name: array for name, array in c["inputs"]}
    if c["expected"] is not None:
        return c["expected"](dict(feeds, **c["inits"]))
    if not c["reference"]:
        try:
            import onnxruntime as ort
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return session.run(c["outputs"], feeds)
        except Exception as e:  # no kernel for this opset: fall back to the reference
            print(f"  {c['name']}: onnxruntime failed ({type(e).__name__}), using the reference evaluator")
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(c["outputs"], feeds)


def write(c):
    model = build(c)
    results = evaluate(model, c)
    if c["ort_agrees"]:
        import onnxruntime as ort
        feeds = {name: array for name, array in c["inputs"]}
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(c["outputs"], feeds)
        for name, a, b in zip(c["outputs"], got, results):
            assert np.array_equal(a, b), f"{c['name']}/{name}: onnxruntime differs from the reference:\n{a}\n{b}"
    folder = os.path.join(HERE, c["name"])
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for i, (name, array) in enumerate(c["inputs"]):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(array, name).SerializeToString())
    for i, (name, array) in enumerate(zip(c["outputs"], results)):
        with open(os.path.join(folder, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(array), name).SerializeToString())


N = helper.make_node

# ---- conv ----
case("conv_pads_strides", [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1])],
     [("x", rand(1, 2, 5, 5))], 11, {"w": rand(3, 2, 3, 3), "b": rand(3)})
case("conv_groups_dilations", [N("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 2], pads=[1, 1, 1, 1])],
     [("x", rand(2, 4, 6, 6))], 22, {"w": rand(4, 2, 3, 3)})
case("conv_same_upper", [N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
     [("x", rand(1, 1, 5, 6))], 11, {"w": rand(2, 1, 4, 3)})
case("conv_same_lower", [N("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2])],
     [("x", rand(1, 1, 5, 6))], 1, {"w": rand(2, 1, 4, 3)})
case("conv_valid_1d", [N("Conv", ["x", "w", "b"], ["y"], auto_pad="VALID", kernel_shape=[3])],
     [("x", rand(1, 2, 7))], 11, {"w": rand(2, 2, 3), "b": rand(2)})
case("conv_3d_dynamic_batch", [N("Conv", ["x", "w"], ["y"], pads=[1, 0, 0, 0, 1, 0])],
     [("x", rand(2, 1, 3, 3, 3))], 11, {"w": rand(2, 1, 2, 2, 2)}, dims={"x": ["N", 1, 3, 3, 3]})
case("conv_transpose_strides_pads", [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])],
     [("x", rand(1, 2, 3, 3))], 11, {"w": rand(2, 3, 3, 3), "b": rand(3)})
case("conv_transpose_output_padding_groups",
     [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 3], output_padding=[1, 2], group=2, dilations=[1, 2])],
     [("x", rand(1, 4, 2, 3))], 22, {"w": rand(4, 1, 2, 2)})
case("conv_transpose_output_shape", [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[6, 7])],
     [("x", rand(1, 1, 3, 3))], 11, {"w": rand(1, 2, 3, 3)})
case("conv_transpose_same_upper", [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER")],
     [("x", rand(1, 1, 3, 3))], 11, {"w": rand(1, 1, 4, 4)})
case("conv_transpose_same_lower", [N("ConvTranspose", ["x", "w"], ["y"], strides=[2], auto_pad="SAME_LOWER")],
     [("x", rand(1, 2, 4))], 11, {"w": rand(2, 1, 3)})

# ---- pooling ----
case("maxpool_pads_strides", [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 0, 2], strides=[2, 2])],
     [("x", rand(1, 2, 6, 5))], 8)
case("maxpool_same_upper", [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 2])],
     [("x", rand(1, 1, 5, 5))], 12)
case("maxpool_same_lower", [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], auto_pad="SAME_LOWER", strides=[2, 2])],
     [("x", rand(1, 1, 5, 5))], 7)
case("maxpool_ceil_dilations", [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1, dilations=[2, 1], strides=[2, 2])],
     [("x", rand(1, 2, 7, 6))], 12)
case("maxpool_1d_int8", [N("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2])],
     [("x", ints([[[1, -5, 7, 3, 9, -2, 4]]], np.int8))], 12)
case("averagepool_exclude_pad", [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])],
     [("x", rand(1, 2, 5, 5))], 11)
case("averagepool_include_pad", [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)],
     [("x", rand(1, 1, 4, 4))], 7)
case("averagepool_ceil", [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
     [("x", rand(1, 1, 5, 5))], 10)
case("averagepool_dilations_19", [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])],
     [("x", rand(1, 1, 5, 5))], 19)
case("global_average_pool", [N("GlobalAveragePool", ["x"], ["y"])], [("x", rand(2, 3, 4, 5))], 1,
     dims={"x": ["N", 3, "H", "W"]})
case("global_max_pool", [N("GlobalMaxPool", ["x"], ["y"])], [("x", rand(1, 3, 4, 2, 2))], 22)

# ---- math ----
case("gemm_trans_alpha_beta", [N("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
     [("a", rand(3, 2))], 13, {"b": rand(4, 3), "c": rand(4)})
case("gemm_opset6_broadcast", [N("Gemm", ["a", "b", "c"], ["y"], broadcast=1)],
     [("a", rand(2, 3))], 6, {"b": rand(3, 4), "c": rand(1, 4)}, reference=True)
case("gemm_no_c", [N("Gemm", ["a", "b"], ["y"], alpha=3.0)], [("a", rand(2, 3)), ("b", rand(3, 2))], 11)
case("matmul_batched_broadcast", [N("MatMul", ["a", "b"], ["y"])], [("a", rand(2, 1, 3, 4)), ("b", rand(3, 4, 2))], 13)
case("matmul_vector_matrix", [N("MatMul", ["a", "b"], ["y"])], [("a", rand(4)), ("b", rand(2, 4, 3))], 13)
case("matmul_matrix_vector", [N("MatMul", ["a", "b"], ["y"])], [("a", rand(2, 3, 4)), ("b", rand(4))], 9)
case("matmul_vector_vector", [N("MatMul", ["a", "b"], ["y"])], [("a", rand(4)), ("b", rand(4))], 13)
case("add_legacy_broadcast_axis", [N("Add", ["a", "b"], ["y"], broadcast=1, axis=1)],
     [("a", rand(2, 3, 4, 5)), ("b", rand(3, 4))], 6, expected=lambda f: [f["a"] + f["b"].reshape(3, 4, 1)])
case("mul_div_sub_broadcast", [N("Mul", ["a", "b"], ["t"]), N("Div", ["t", "c"], ["u"]), N("Sub", ["u", "a"], ["y"])],
     [("a", rand(2, 3)), ("b", rand(3)), ("c", rand(2, 1, low=1.0, high=2.0))], 14)
case("pow_mixed_types", [N("Pow", ["x", "e"], ["y"])], [("x", rand(2, 3, low=0.5, high=2.0)), ("e", ints([2, 3, -1]))], 15)
case("pow_float", [N("Pow", ["x", "e"], ["y"])], [("x", rand(2, 3, low=0.5, high=2.0)), ("e", rand(3, low=-1, high=2))], 7)
case("div_int_truncates", [N("Div", ["a", "b"], ["y"])], [("a", ints([7, -7, 9, 5], np.int32)), ("b", ints([2, 2, -4, 5], np.int32))], 14)
case("mod_and_fmod", [N("Mod", ["a", "b"], ["m"]), N("Mod", ["fa", "fb"], ["f"], fmod=1)],
     [("a", ints([7, -7, 7, -7])), ("b", ints([3, 3, -3, -3])), ("fa", rand(4)), ("fb", rand(4, low=0.5, high=1.5))],
     13, outputs=("m", "f"))
case("comparisons", [N("Equal", ["a", "b"], ["eq"]), N("Less", ["a", "b"], ["lt"]), N("Greater", ["a", "b"], ["gt"]),
                     N("LessOrEqual", ["a", "b"], ["le"]), N("GreaterOrEqual", ["a", "b"], ["ge"])],
     [("a", ints([1, 2, 3, 4])), ("b", ints([2, 2, 2, 5]))], 16, outputs=("eq", "lt", "gt", "le", "ge"))
case("logic", [N("And", ["p", "q"], ["and"]), N("Or", ["p", "q"], ["or"]), N("Xor", ["p", "q"], ["xor"]), N("Not", ["p"], ["not"])],
     [("p", np.array([True, True, False, False])), ("q", np.array([True, False, True, False]))], 7,
     outputs=("and", "or", "xor", "not"))
case("variadic_sum_mean_max_min",
     [N("Sum", ["a", "b", "c"], ["sum"]), N("Mean", ["a", "b", "c"], ["mean"]), N("Max", ["a", "b", "c"], ["max"]),
      N("Min", ["a", "b"], ["min"]), N("Sum", ["a"], ["single"])],
     [("a", rand(2, 3)), ("b", rand(3)), ("c", rand(2, 1))], 13, outputs=("sum", "mean", "max", "min", "single"))

# ---- unary and activations ----
case("unary_math", [N(op, ["x"], [op.lower()]) for op in
                    ["Neg", "Abs", "Exp", "Floor", "Ceil", "Erf", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Sign", "Round"]],
     [("x", rand(7, low=-0.9, high=0.9))], 13,
     outputs=[op.lower() for op in ["Neg", "Abs", "Exp", "Floor", "Ceil", "Erf", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Sign", "Round"]])
case("unary_positive", [N(op, ["x"], [op.lower()]) for op in ["Sqrt", "Log", "Reciprocal", "Asin", "Acos", "Atanh", "Acosh"]]
     + [N("Add", ["x", "one"], ["x1"]), N("Acosh", ["x1"], ["acosh1"])],
     [("x", rand(6, low=0.1, high=0.9))], 22, {"one": np.array(1.0, np.float32)},
     outputs=["sqrt", "log", "reciprocal", "asin", "acos", "atanh", "acosh1"])
case("isnan_isinf", [N("IsNaN", ["x"], ["nan"]), N("IsInf", ["x"], ["inf"], detect_negative=0)],
     [("x", np.array([1.0, np.nan, np.inf, -np.inf], np.float32))], 20, outputs=("nan", "inf"))
case("activations", [N("Relu", ["x"], ["relu"]), N("Sigmoid", ["x"], ["sigmoid"]), N("Tanh", ["x"], ["tanh"]),
                     N("LeakyRelu", ["x"], ["leaky"], alpha=0.2), N("HardSigmoid", ["x"], ["hsig"], alpha=0.3, beta=0.4),
                     N("HardSwish", ["x"], ["hswish"]), N("Softplus", ["x"], ["softplus"]), N("Softsign", ["x"], ["softsign"]),
                     N("Elu", ["x"], ["elu"], alpha=0.7), N("Selu", ["x"], ["selu"]),
                     N("ThresholdedRelu", ["x"], ["thr"], alpha=0.5), N("Celu", ["x"], ["celu"], alpha=1.5),
                     N("Mish", ["x"], ["mish"])],
     [("x", rand(3, 4, low=-4, high=4))], 18,
     outputs=("relu", "sigmoid", "tanh", "leaky", "hsig", "hswish", "softplus", "softsign", "elu", "selu", "thr", "celu", "mish"))
case("relu_int", [N("Relu", ["x"], ["y"])], [("x", ints([-3, 0, 5]))], 14)
case("gelu", [N("Gelu", ["x"], ["erf"]), N("Gelu", ["x"], ["tanh"], approximate="tanh")],
     [("x", rand(8, low=-3, high=3))], 20, outputs=("erf", "tanh"))
case("prelu_channel_slope", [N("PRelu", ["x", "slope"], ["y"])], [("x", rand(1, 3, 2, 2))], 16, {"slope": rand(3, 1, 1)})
case("clip_attributes", [N("Clip", ["x"], ["y"], min=-0.5, max=0.7)], [("x", rand(10))], 6)
case("clip_inputs", [N("Clip", ["x", "lo", "hi"], ["both"]), N("Clip", ["x", "lo"], ["low"]), N("Clip", ["x", "", "hi"], ["high"]),
                     N("Clip", ["x"], ["none"])],
     [("x", rand(10))], 13, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)},
     outputs=("both", "low", "high", "none"))
case("clip_runtime_bounds", [N("Clip", ["x", "lo", "hi"], ["y"])],
     [("x", rand(10)), ("lo", np.array(-1.0, np.float32)), ("hi", np.array(0.25, np.float32))], 12)
case("clip_int", [N("Clip", ["x", "lo", "hi"], ["y"])], [("x", ints([-9, -2, 0, 4, 11]))], 13,
     {"lo": np.array(-3, np.int64), "hi": np.array(5, np.int64)})
case("softmax_13_axis1", [N("Softmax", ["x"], ["y"], axis=1)], [("x", rand(2, 3, 4))], 13)
case("softmax_13_default", [N("Softmax", ["x"], ["y"])], [("x", rand(2, 3, 4))], 13)
case("softmax_11_coerced", [N("Softmax", ["x"], ["y"], axis=1)], [("x", rand(2, 3, 4))], 11)
case("softmax_11_dynamic", [N("Softmax", ["x"], ["y"], axis=-2)], [("x", rand(2, 3, 4, 2))], 11,
     dims={"x": ["N", "C", 4, 2]})
case("softmax_1_default_axis", [N("Softmax", ["x"], ["y"])], [("x", rand(2, 2, 3))], 7)
case("softmax_11_axis0", [N("Softmax", ["x"], ["y"], axis=0)], [("x", rand(2, 3))], 11)

# ---- normalization ----
case("layer_norm", [N("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2, epsilon=1e-3)],
     [("x", rand(2, 3, 4))], 17, {"s": rand(3, 4), "b": rand(3, 4)})
case("layer_norm_no_bias", [N("LayerNormalization", ["x", "s"], ["y"])], [("x", rand(2, 5))], 17, {"s": rand(5)})
case("batch_norm_9", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
     [("x", rand(2, 3, 2, 2))], 9, {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, low=0.5, high=2)})
case("batch_norm_15_runtime_params", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
     [("x", rand(2, 3, 4)), ("s", rand(3)), ("b", rand(3)), ("m", rand(3)), ("v", rand(3, low=0.5, high=2))], 15)
case("batch_norm_6_2d", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], is_test=1)],
     [("x", rand(4, 3))], 6, {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, low=0.5, high=2)}, reference=True)
case("instance_norm", [N("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)],
     [("x", rand(2, 3, 4, 2))], 6, {"s": rand(3), "b": rand(3)})

# ---- reductions ----
case("reduce_sum_11_attr", [N("ReduceSum", ["x"], ["y"], axes=[0, -1], keepdims=0)], [("x", rand(2, 3, 4))], 11)
case("reduce_sum_13_input", [N("ReduceSum", ["x", "axes"], ["y"])], [("x", rand(2, 3, 4))], 13, {"axes": ints([1])})
case("reduce_sum_13_all", [N("ReduceSum", ["x"], ["y"], keepdims=0)], [("x", rand(2, 3))], 13)
case("reduce_mean_13_attr", [N("ReduceMean", ["x"], ["y"], axes=[1])], [("x", rand(2, 3, 4))], 13)
case("reduce_mean_18_input", [N("ReduceMean", ["x", "axes"], ["y"], keepdims=0)], [("x", rand(2, 3, 4))], 18,
     {"axes": ints([-1, 0])})
case("reduce_max_min_prod", [N("ReduceMax", ["x", "axes"], ["max"]), N("ReduceMin", ["x", "axes"], ["min"], keepdims=0),
                             N("ReduceProd", ["x"], ["prod"], keepdims=0)],
     [("x", rand(2, 3))], 18, {"axes": ints([0])}, outputs=("max", "min", "prod"))
case("reduce_max_11", [N("ReduceMax", ["x"], ["max"], axes=[1])], [("x", rand(2, 3))], 11, outputs=("max",))
case("reduce_l1_l2_logsumexp", [N("ReduceL1", ["x", "axes"], ["l1"]), N("ReduceL2", ["x", "axes"], ["l2"]),
                                N("ReduceLogSumExp", ["x", "axes"], ["lse"]), N("ReduceSumSquare", ["x", "axes"], ["ss"]),
                                N("ReduceLogSum", ["ax", "axes"], ["ls"])],
     [("x", rand(2, 3)), ("ax", rand(2, 3, low=0.5, high=2))], 18, {"axes": ints([1])}, outputs=("l1", "l2", "lse", "ss", "ls"))

# ---- shape manipulation ----
case("reshape_zero_and_minus_one", [N("Reshape", ["x", "s"], ["y"])], [("x", rand(2, 3, 4))], 13, {"s": ints([0, -1, 2])})
case("reshape_dynamic_shape_input", [N("Reshape", ["x", "s"], ["y"])], [("x", rand(2, 6)), ("s", ints([3, -1]))], 14)
case("reshape_allowzero", [N("Reshape", ["x", "s"], ["y"], allowzero=1)], [("x", np.zeros((0, 3), np.float32))], 14,
     {"s": ints([3, 0])})
case("reshape_1_attr", [N("Reshape", ["x"], ["y"], shape=[3, -1])], [("x", rand(2, 3))], 1,
     expected=lambda f: [f["x"].reshape(3, -1)])
case("transpose_default_and_perm", [N("Transpose", ["x"], ["t"]), N("Transpose", ["x"], ["p"], perm=[1, 2, 0])],
     [("x", rand(2, 3, 4))], 13, outputs=("t", "p"))
case("flatten_axes", [N("Flatten", ["x"], ["a0"], axis=0), N("Flatten", ["x"], ["a2"], axis=2), N("Flatten", ["x"], ["neg"], axis=-1)],
     [("x", rand(2, 3, 2, 2))], 13, outputs=("a0", "a2", "neg"))
case("flatten_dynamic", [N("Flatten", ["x"], ["y"], axis=2)], [("x", rand(2, 3, 2, 2))], 11, dims={"x": ["A", "B", "C", "D"]})
case("squeeze_11_attr", [N("Squeeze", ["x"], ["y"], axes=[1, -1])], [("x", rand(2, 1, 3, 1))], 11, dims={"x": ["N", 1, 3, 1]})
case("squeeze_13_input", [N("Squeeze", ["x", "axes"], ["y"])], [("x", rand(1, 3, 1))], 13, {"axes": ints([0])})
case("squeeze_all", [N("Squeeze", ["x"], ["y"])], [("x", rand(1, 3, 1, 2))], 13)
case("unsqueeze_11_attr", [N("Unsqueeze", ["x"], ["y"], axes=[0, -1])], [("x", rand(2, 3))], 11, dims={"x": ["N", 3]})
case("unsqueeze_13_input", [N("Unsqueeze", ["x", "axes"], ["y"])], [("x", rand(2, 3))], 13, {"axes": ints([3, 1])})
case("unsqueeze_1_attr", [N("Unsqueeze", ["x"], ["y"], axes=[1])], [("x", rand(2, 3))], 1, reference=True)
case("concat_negative_axis", [N("Concat", ["a", "b", "c"], ["y"], axis=-1)], [("a", rand(2, 1)), ("b", rand(2, 3)), ("c", rand(2, 2))], 13)
case("split_2_attr", [N("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])], [("x", rand(2, 4))], 2, outputs=("a", "b"),
     reference=True)
case("split_11_equal", [N("Split", ["x"], ["a", "b", "c"])], [("x", rand(6, 2))], 11, outputs=("a", "b", "c"))
case("split_13_input", [N("Split", ["x", "s"], ["a", "b"], axis=-1)], [("x", rand(2, 5))], 13, {"s": ints([2, 3])},
     outputs=("a", "b"))
case("split_13_equal_dynamic", [N("Split", ["x"], ["a", "b"], axis=0)], [("x", rand(4, 3))], 13, outputs=("a", "b"),
     dims={"x": ["N", 3]})
case("split_18_num_outputs_uneven", [N("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], [("x", rand(2, 7))], 18,
     outputs=("a", "b", "c"))
case("split_18_dynamic_uneven", [N("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], [("x", rand(2, 7))], 18,
     outputs=("a", "b", "c"), dims={"x": [2, "W"]})
case("slice_1_attrs", [N("Slice", ["x"], ["y"], starts=[1, 0], ends=[1000, -1], axes=[0, 2])], [("x", rand(3, 2, 4))], 1,
     reference=True)
case("slice_13_steps", [N("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [("x", rand(4, 5))], 13,
     {"st": ints([-1, 0]), "en": ints([-5, 5]), "ax": ints([0, -1]), "sp": ints([-2, 2])})
case("slice_10_runtime_bounds", [N("Slice", ["x", "st", "en"], ["y"])], [("x", rand(4, 5)), ("st", ints([1, 1])), ("en", ints([3, 4]))], 10)
case("shape_15_start_end", [N("Shape", ["x"], ["all"]), N("Shape", ["x"], ["tail"], start=1), N("Shape", ["x"], ["mid"], start=-3, end=-1)],
     [("x", rand(2, 3, 4, 1))], 15, outputs=("all", "tail", "mid"))
case("shape_15_dynamic_slice", [N("Shape", ["x"], ["s"], start=1, end=3), N("Cast", ["s"], ["y"], to=TensorProto.FLOAT)],
     [("x", rand(2, 3, 4))], 15, dims={"x": ["A", "B", "C"]})
case("shape_reshape_chain", [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["n"], axis=0),
                             N("Unsqueeze", ["n", "axes"], ["n1"]), N("Concat", ["n1", "minus_one"], ["dims"], axis=0),
                             N("Reshape", ["x", "dims"], ["y"])],
     [("x", rand(2, 3, 2))], 13, {"zero": np.array(0, np.int64), "axes": ints([0]), "minus_one": ints([-1])},
     dims={"x": ["N", 3, 2]})
case("expand", [N("Expand", ["x", "s"], ["y"])], [("x", rand(3, 1))], 13, {"s": ints([2, 1, 4])})
case("tile_fixed", [N("Tile", ["x", "r"], ["y"])], [("x", rand(2, 3))], 13, {"r": ints([2, 3])})
case("tile_dynamic", [N("Tile", ["x", "r"], ["y"])], [("x", rand(2, 3)), ("r", ints([3, 1]))], 13, dims={"x": ["N", 3]})

# ---- gather / scatter / select / cast ----
case("gather_axis1_negative_indices", [N("Gather", ["x", "i"], ["y"], axis=1)], [("x", rand(2, 4, 3))], 13,
     {"i": ints([[0, -1], [2, 1]])})
case("gather_scalar_index", [N("Gather", ["x", "i"], ["y"])], [("x", rand(3, 2))], 1, {"i": np.array(2, np.int64)})
case("gather_elements", [N("GatherElements", ["x", "i"], ["y"], axis=-1)], [("x", rand(2, 3))], 13,
     {"i": ints([[0, 2, 0, 1], [2, 2, 1, 0]])})
case("gather_nd_batch_dims", [N("GatherND", ["x", "i"], ["y"], batch_dims=1)], [("x", rand(2, 3, 2))], 13,
     {"i": ints([[[1], [0]], [[2], [2]]])})
case("scatter_nd_add", [N("ScatterND", ["x", "i", "u"], ["y"], reduction="add")], [("x", rand(4, 2))], 16,
     {"i": ints([[1], [3], [1]]), "u": rand(3, 2)})
case("scatter_elements", [N("ScatterElements", ["x", "i", "u"], ["y"], axis=1)], [("x", rand(2, 3))], 13,
     {"i": ints([[2, 0], [1, 1]]), "u": rand(2, 2)})
case("where_broadcast", [N("Where", ["c", "a", "b"], ["y"])], [("c", np.array([[True, False, True]])), ("a", rand(2, 3)), ("b", rand(3))], 16)
case("cast_variants", [N("Cast", ["x"], ["i"], to=TensorProto.INT32), N("Cast", ["x"], ["b"], to=TensorProto.BOOL),
                       N("Cast", ["i"], ["d"], to=TensorProto.DOUBLE)],
     [("x", np.array([-2.7, -0.2, 0.0, 1.9, 3.5], np.float32))], 19, outputs=("i", "b", "d"))
case("cast_1_string_to", [N("Cast", ["x"], ["y"], to="INT64")], [("x", np.array([1.5, -2.5], np.float32))], 1,
     expected=lambda f: [f["x"].astype(np.int64)])

# ---- resize ----
case("resize_10_nearest", [N("Resize", ["x", "s"], ["y"])], [("x", rand(1, 1, 2, 3))], 10,
     {"s": np.array([1, 1, 3, 1.5], np.float32)})
case("resize_10_linear", [N("Resize", ["x", "s"], ["y"], mode="linear")], [("x", rand(1, 1, 2, 2))], 10,
     {"s": np.array([1, 1, 2, 2], np.float32)})
case("resize_11_align_corners_linear", [N("Resize", ["x", "roi", "s"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")],
     [("x", rand(1, 1, 3, 3))], 11, {"roi": np.array([], np.float32), "s": np.array([1, 1, 2, 2], np.float32)})
case("resize_11_sizes_nearest_ceil", [N("Resize", ["x", "roi", "scales", "sizes"], ["y"], coordinate_transformation_mode="asymmetric",
                                        nearest_mode="round_prefer_ceil")],
     [("x", rand(1, 2, 3, 4))], 11,
     {"roi": np.array([], np.float32), "scales": np.array([], np.float32), "sizes": ints([1, 2, 5, 3])})
case("resize_13_cubic", [N("Resize", ["x", "", "s"], ["y"], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)],
     [("x", rand(1, 1, 4, 4))], 13, {"s": np.array([1, 1, 1.5, 0.75], np.float32)})
case("resize_13_pytorch_half_pixel", [N("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                                        coordinate_transformation_mode="pytorch_half_pixel")],
     [("x", rand(1, 1, 3, 4))], 13, {"sizes": ints([1, 1, 1, 6])})
case("resize_13_tf_crop", [N("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                             coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9.0)],
     [("x", rand(1, 1, 4, 4))], 13, {"roi": np.array([0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], np.float32), "sizes": ints([1, 1, 3, 3])})
case("resize_18_axes", [N("Resize", ["x", "", "s"], ["y"], axes=[-1, 2], mode="nearest", nearest_mode="floor")],
     [("x", rand(1, 2, 2, 3))], 18, {"s": np.array([2, 1.5], np.float32)})
case("resize_19_half_pixel_symmetric", [N("Resize", ["x", "", "s"], ["y"], mode="linear",
                                          coordinate_transformation_mode="half_pixel_symmetric")],
     [("x", rand(1, 1, 2, 4))], 19, {"s": np.array([1, 1, 2.5, 0.6], np.float32)})
case("upsample_9", [N("Upsample", ["x", "s"], ["y"])], [("x", rand(1, 1, 2, 2))], 9,
     {"s": np.array([1, 1, 2, 3], np.float32)})

# ---- constants, fills, padding ----
case("constant_variants", [N("Constant", [], ["c"], value=numpy_helper.from_array(rand(2, 2))),
                           N("Constant", [], ["f"], value_float=2.5), N("Constant", [], ["fs"], value_floats=[1.0, 2.0]),
                           N("Add", ["x", "c"], ["t"]), N("Mul", ["t", "f"], ["u"]), N("Add", ["u", "fs"], ["y"]),
                           N("Constant", [], ["i"], value_ints=[4, 5]), N("Constant", [], ["one"], value_int=1),
                           N("Add", ["i", "one"], ["k"])],
     [("x", rand(2, 2))], 13, outputs=("y", "k"))
case("constant_of_shape", [N("ConstantOfShape", ["s"], ["d"]),
                           N("ConstantOfShape", ["s"], ["v"], value=numpy_helper.from_array(ints([7], np.int32)))],
     [("s", ints([2, 3]))], 20, outputs=("d", "v"))
case("range_constant", [N("Range", ["a", "b", "c"], ["f"]), N("Range", ["ia", "ib", "ic"], ["i"])],
     [("x", rand(1))], 11,
     {"a": np.array(1.0, np.float32), "b": np.array(3.1, np.float32), "c": np.array(0.5, np.float32),
      "ia": np.array(10, np.int64), "ib": np.array(3, np.int64), "ic": np.array(-3, np.int64)}, outputs=("f", "i"))
case("range_runtime", [N("Range", ["a", "b", "c"], ["f"]), N("Range", ["ia", "ib", "ic"], ["i"])],
     [("a", np.array(-1.0, np.float32)), ("b", np.array(2.2, np.float32)), ("c", np.array(0.75, np.float32)),
      ("ia", np.array(2, np.int32)), ("ib", np.array(-7, np.int32)), ("ic", np.array(-2, np.int32))],
     11, outputs=("f", "i"))
case("dropout_12", [N("Dropout", ["x", "r"], ["y"])], [("x", rand(3))], 12, {"r": np.array(0.3, np.float32)})
case("pad_11_constant_value", [N("Pad", ["x", "p", "v"], ["y"])], [("x", rand(2, 3))], 11,
     {"p": ints([1, 0, 0, 2]), "v": np.array(1.5, np.float32)})
case("pad_reflect_edge", [N("Pad", ["x", "p"], ["r"], mode="reflect"), N("Pad", ["x", "p"], ["e"], mode="edge")],
     [("x", rand(1, 3, 4))], 13, {"p": ints([0, 1, 2, 0, 1, 1])}, outputs=("r", "e"))
case("pad_19_wrap", [N("Pad", ["x", "p"], ["y"], mode="wrap")], [("x", rand(2, 3))], 19, {"p": ints([1, 2, 0, 1])})
case("pad_18_axes", [N("Pad", ["x", "p", "", "a"], ["y"])], [("x", rand(2, 3, 2))], 18, {"p": ints([1, 2, 0, 1]), "a": ints([-1, 0])})
case("pad_18_axes_runtime_pads", [N("Pad", ["x", "p", "", "a"], ["y"])], [("x", rand(2, 3, 2)), ("p", ints([1, 2, 0, 1]))], 18,
     {"a": ints([1, 2])})
case("pad_2_attrs", [N("Pad", ["x"], ["y"], pads=[0, 1, 1, 0], value=-3.0)], [("x", rand(2, 2))], 2, reference=True)
case("pad_negative_crop", [N("Pad", ["x", "p"], ["y"])], [("x", rand(3, 4))], 13, {"p": ints([-1, 1, 0, -2])})

# ---- recurrent ops: every direction, sequence lengths shorter than the sequence, initial states ----
T, B, I, H = 5, 3, 4, 3
seq_lens = ints([5, 3, 1], np.int32)
case("lstm_bidirectional_seq_lens", [N("LSTM", ["x", "w", "r", "b", "l", "h0", "c0"], ["y", "yh", "yc"],
                                       hidden_size=H, direction="bidirectional")],
     [("x", rand(T, B, I)), ("l", seq_lens), ("h0", rand(2, B, H)), ("c0", rand(2, B, H))], 14,
     {"w": rand(2, 4 * H, I, low=-1, high=1), "r": rand(2, 4 * H, H, low=-1, high=1), "b": rand(2, 8 * H, low=-1, high=1)},
     outputs=("y", "yh", "yc"))
case("gru_reverse_seq_lens_linear_before_reset",
     [N("GRU", ["x", "w", "r", "b", "l", "h0"], ["y", "yh"], hidden_size=H, direction="reverse", linear_before_reset=1)],
     [("x", rand(T, B, I)), ("l", seq_lens), ("h0", rand(1, B, H))], 14,
     {"w": rand(1, 3 * H, I, low=-1, high=1), "r": rand(1, 3 * H, H, low=-1, high=1), "b": rand(1, 6 * H, low=-1, high=1)},
     outputs=("y", "yh"))
case("rnn_bidirectional_activations_seq_lens",
     [N("RNN", ["x", "w", "r", "b", "l"], ["y", "yh"], hidden_size=H, direction="bidirectional",
        activations=["Relu", "Sigmoid"])],
     [("x", rand(T, B, I)), ("l", seq_lens)], 14,
     {"w": rand(2, H, I, low=-1, high=1), "r": rand(2, H, H, low=-1, high=1), "b": rand(2, 2 * H, low=-1, high=1)},
     outputs=("y", "yh"))


def scan8_body():
    s_in = helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [2])
    x_t = helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])
    s_out = helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2])
    y_t = helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])
    nodes = [N("Add", ["s_in", "x_t"], ["s_out"]), N("Mul", ["s_out", "x_t"], ["y_t"])]
    return helper.make_graph(nodes, "scan8_body", [s_in, x_t], [s_out, y_t])


case("scan_8_sequence_lens",
     [N("Scan", ["l", "s0", "x"], ["s_fwd", "y_fwd"], body=scan8_body(), num_scan_inputs=1),
      N("Scan", ["l", "s0", "x"], ["s_rev", "y_rev"], body=scan8_body(), num_scan_inputs=1, directions=[1])],
     [("l", ints([3, 1, 4])), ("s0", rand(3, 2)), ("x", rand(3, 4, 2))], 8,
     outputs=("s_fwd", "y_fwd", "s_rev", "y_rev"))

# ---- sequences: run-time-length sequences lowered onto stacked tensors ----
case("sequence_ops_dynamic_length",
     [N("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
      N("SequenceAt", ["s", "pos"], ["at"]),
      N("SequenceLength", ["s"], ["len"]),
      N("ConcatFromSequence", ["s"], ["cat1"], axis=1),
      N("ConcatFromSequence", ["s"], ["stack2"], axis=2, new_axis=1),
      N("SequenceInsert", ["s", "e"], ["s2"]),
      N("ConcatFromSequence", ["s2"], ["cat0"], axis=0),
      N("SequenceErase", ["s2"], ["s3"]),
      N("ConcatFromSequence", ["s3"], ["stack0"], axis=0, new_axis=1),
      N("SplitToSequence", ["x"], ["k"], axis=1),
      N("ConcatFromSequence", ["k"], ["kept"], axis=-1, new_axis=1)],
     [("x", rand(3, 2, 4)), ("pos", np.array(-1, np.int64)), ("e", rand(2, 4))], 17,
     outputs=("at", "len", "cat1", "stack2", "cat0", "stack0", "kept"), dims={"x": ["n", 2, 4]})
case("sequence_ops_static",
     [N("SequenceConstruct", ["a", "b", "c"], ["s"]),
      N("SequenceInsert", ["s", "b", "zero"], ["s2"]),
      N("SequenceErase", ["s2", "minus_one"], ["s3"]),
      N("SequenceAt", ["s3", "pos"], ["at"]),
      N("SequenceLength", ["s3"], ["len"]),
      N("ConcatFromSequence", ["s3"], ["cat"], axis=-1),
      N("SplitToSequence", ["a", "two"], ["chunks"], axis=1),
      N("SequenceAt", ["chunks", "one"], ["last_chunk"])],
     [("a", rand(2, 3)), ("b", rand(2, 3)), ("c", rand(2, 3)), ("pos", np.array(1, np.int64))], 17,
     {"zero": np.array(0, np.int64), "minus_one": np.array(-1, np.int64), "two": np.array(2, np.int64),
      "one": np.array(1, np.int64)},
     outputs=("at", "len", "cat", "last_chunk"))

# ---- the long tail: signal ops, context-dependent function bodies, integer convolution ----
case("dft_20_rfft_runtime_axis_length", [N("DFT", ["x", "n", "axis"], ["y"], onesided=1)],
     [("x", rand(2, 3, 8, 1)), ("n", np.array(6, np.int64)), ("axis", np.array(2, np.int64))], 20)
case("dft_17_inverse_complex_padded", [N("DFT", ["x", "n"], ["y"], axis=1, inverse=1)],
     [("x", rand(1, 7, 3, 2))], 17, {"n": np.array(10, np.int64)})
case("dft_20_irfft_odd_length", [N("DFT", ["x", "n", "axis"], ["y"], inverse=1, onesided=1)],
     [("x", rand(2, 4, 2))], 20, {"n": np.array(7, np.int64), "axis": np.array(-2, np.int64)})
case("stft_window_frame_length", [N("STFT", ["x", "step", "w", "len"], ["y"], onesided=0)],
     [("x", rand(2, 40, 1)), ("step", np.array(5, np.int64))], 17,
     {"w": (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(12) / 12)).astype(np.float32), "len": np.array(12, np.int64)})
case("col2im_strides_pads_dilations", [N("Col2Im", ["x", "image", "block"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
                                         dilations=[1, 2])],
     [("x", rand(1, 12, 9)), ("image", ints([5, 6]))], 18, {"block": ints([2, 3])})
case("det_batched", [N("Det", ["x"], ["y"])], [("x", rand(2, 3, 3, 3))], 22)
case("maxunpool_pads_output_shape", [N("MaxUnpool", ["x", "i", "shape"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                       pads=[1, 1, 1, 1])],
     [("x", rand(1, 2, 2, 2)), ("i", ints([[[[0, 2], [7, 8]], [[9, 12], [14, 17]]]]))], 22,
     {"shape": ints([1, 2, 4, 3])}, reference=True)
case("tensor_scatter_circular_axis", [N("TensorScatter", ["cache", "update", "at"], ["y"], mode="circular", axis=2)],
     [("cache", rand(2, 3, 5, 2)), ("update", rand(2, 3, 3, 2)), ("at", ints([3, 1]))], 24, reference=True)
case("conv_integer_per_channel", [N("ConvInteger", ["x", "w", "xz", "wz"], ["y"], strides=[2, 1], pads=[1, 1, 0, 0])],
     [("x", RNG.integers(0, 255, size=(1, 2, 5, 4)).astype(np.uint8))], 10,
     {"w": RNG.integers(0, 255, size=(3, 2, 2, 2)).astype(np.uint8), "xz": np.array(7, np.uint8),
      "wz": ints([1, 128, 200], np.uint8)})
case("matmul_integer_per_row", [N("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
     [("a", RNG.integers(0, 255, size=(3, 4)).astype(np.uint8))], 10,
     {"b": RNG.integers(0, 255, size=(4, 2)).astype(np.uint8), "az": ints([3, 100, 250], np.uint8),
      "bz": ints([9, 17], np.uint8)},
     # A per-row zero point of A ([M]) is in the spec but neither runtime implements it.
     expected=lambda f: [(f["a"].astype(np.int32) - f["az"].astype(np.int32)[:, None])
                         @ (f["b"].astype(np.int32) - f["bz"].astype(np.int32))])
case("scatter_9_axis", [N("Scatter", ["x", "i", "u"], ["y"], axis=1)],
     [("x", rand(2, 4)), ("u", rand(2, 2))], 9, {"i": ints([[3, 0], [1, 2]])})
case("rotary_embedding_3d_interleaved_partial", [N("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=2,
                                                   rotary_embedding_dim=4, interleaved=1)],
     [("x", rand(2, 3, 16)), ("pos", ints([[0, 4, 2], [1, 1, 3]]))], 23, {"cos": rand(5, 2), "sin": rand(5, 2)})
case("causal_conv_with_state_silu_bias_past", [N("CausalConvWithState", ["x", "w", "b", "past"], ["y", "state"],
                                                 activation="silu")],
     [("x", rand(2, 3, 5)), ("past", rand(2, 3, 2))], 27, {"w": rand(3, 1, 3), "b": rand(3)},
     outputs=("y", "state"), reference=True)
case("linear_attention_gated_delta_gqa_past", [N("LinearAttention", ["q", "k", "v", "s", "d", "beta"], ["y", "state"],
                                                 q_num_heads=4, kv_num_heads=2, scale=0.3)],
     [("q", rand(2, 3, 16)), ("k", rand(2, 3, 8)), ("v", rand(2, 3, 6)), ("s", rand(2, 2, 4, 3)),
      ("d", rand(2, 3, 8, low=-1.0, high=0.0)), ("beta", rand(2, 3, 2, low=0.0, high=1.0))], 27,
     outputs=("y", "state"), reference=True)
case("flex_attention_gqa_prob_mod", [N("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", scale=0.5,
                                       prob_mod=helper.make_graph([N("Mul", ["p", "half"], ["p_out"])], "prob_mod",
                                                                  [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
                                                                  [helper.make_tensor_value_info("p_out", TensorProto.FLOAT, None)],
                                                                  [numpy_helper.from_array(np.array(0.5, np.float32), "half")]))],
     [("q", rand(1, 4, 3, 8)), ("k", rand(1, 2, 5, 8)), ("v", rand(1, 2, 5, 6))], 23, reference=True,
     domains={"ai.onnx.preview": 1})
case("dropout_22_runtime_training_off", [N("Dropout", ["x", "r", "t"], ["y", "mask"])],
     [("x", rand(2, 3)), ("r", np.array(0.5, np.float32)), ("t", np.array(False))], 22, outputs=("y", "mask"))
case("pad_18_runtime_axes", [N("Pad", ["x", "p", "v", "a"], ["y"])],
     [("x", rand(2, 3, 2)), ("p", ints([1, 0, 2, 1])), ("a", ints([-1, 1]))], 18, {"v": np.array(0.5, np.float32)})
case("roi_align_16_max_adaptive", [N("RoiAlign", ["x", "rois", "b"], ["avg"], output_height=3, output_width=2,
                                     spatial_scale=0.5),
                                   N("RoiAlign", ["x", "rois", "b"], ["max"], mode="max", output_height=2,
                                     output_width=2, sampling_ratio=2, coordinate_transformation_mode="output_half_pixel")],
     [("x", rand(2, 2, 6, 5)), ("rois", np.array([[0.5, 1.0, 7.0, 9.5], [2.0, 0.0, 4.0, 3.0], [-1.0, 2.0, 3.0, 13.0]],
                                                  np.float32)), ("b", ints([1, 0, 1]))], 16, outputs=("avg", "max"),
     reference=True)
case("reduce_sum_13_noop_runtime_empty_axes", [N("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=1)],
     [("x", rand(2, 3)), ("axes", ints([]))], 13)
case("eye_like_int_without_dtype", [N("EyeLike", ["x"], ["y"], k=1)], [("x", ints([[1, 2, 3], [4, 5, 6]], np.int32))], 22)


def _conv3x3_acc(x, w):
    """The exact integer sum of a 3x3 convolution, pads 1, of int64 arrays."""
    n, _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((n, w.shape[0], h, wd), np.int64)
    for ky in range(3):
        for kx in range(3):
            acc += np.einsum("nchw,mc->nmhw", padded[:, :, ky:ky + h, kx:kx + wd], w[:, :, ky, kx])
    return acc


def qlinear_conv_int8_expected(f):
    """QLinearConv as the standard describes it, per output channel (its reference evaluator
    broadcasts a per-channel scale along the last axis instead): integer convolution plus the
    int32 bias, times x_scale * w_scale / y_scale (f32), plus the zero point, saturated, rounded
    half to even."""
    x = f["x"].astype(np.int64) - int(f["xz"])
    w = f["w"].astype(np.int64) - f["wz"].astype(np.int64)[:, None, None, None]
    acc = _conv3x3_acc(x, w)
    acc += f["b"].astype(np.int64)[None, :, None, None]
    scale = (f["xs"] * f["ws"] / f["ys"]).astype(np.float32).astype(np.float64)
    r = acc.astype(np.float64) * scale[None, :, None, None] + float(f["yz"])
    return [np.round(np.clip(r, -128, 127)).astype(np.int8)]


# Its own generator, so that the cases above keep their draws.
_QRNG = np.random.default_rng(4321)
case("qlinear_conv_int8_per_channel_bias",
     [N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 1, 1, 1])],
     [("x", _QRNG.integers(-128, 128, size=(2, 3, 5, 4)).astype(np.int8))], 10,
     {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8),
      "w": _QRNG.integers(-127, 128, size=(4, 3, 3, 3)).astype(np.int8),
      "ws": np.array([0.01, 0.002, 0.03, 0.0005], np.float32), "wz": np.zeros(4, np.int8),
      "ys": np.array(0.4, np.float32), "yz": np.array(-5, np.int8),
      "b": _QRNG.integers(-2000, 2000, size=4).astype(np.int32)},
     expected=qlinear_conv_int8_expected)

def _requantize(acc, multiplier, zero, low, high, relu=False):
    """An integer kernel's requantization: f32(acc) * f32 multiplier, rounded half to even."""
    v = np.rint(acc.astype(np.float32) * multiplier.astype(np.float32))
    if relu:
        v = np.maximum(v, 0)
    return np.clip(v + zero, low, high)


def qdq_conv_matmul_expected(f):
    """Integer arithmetic, as onnxruntime fuses the Q/DQ pairs into QLinearConv and
    QLinearMatMul: exact sums, int32 bias, one f32 multiplier x_scale * w_scale / y_scale."""
    xq = np.clip(np.rint(f["x"] / f["xs"]) + 128, 0, 255)
    acc = _conv3x3_acc(xq.astype(np.int64) - 128, f["w"].astype(np.int64)) + f["b"].astype(np.int64)[None, :, None, None]
    m = (f["xs"] * f["ws"] / f["ys"]).astype(np.float32)[None, :, None, None]
    y1 = _requantize(acc, m, 0, 0, 255, relu=True).astype(np.uint8)
    flat = y1.astype(np.int64).reshape(y1.shape[0], -1)
    acc2 = flat @ f["w2"].astype(np.int64) + f["b2"].astype(np.int64)[None, :]
    m2 = (f["ys"] * f["ws2"] / f["ys2"]).astype(np.float32)[None, :]
    y2 = _requantize(acc2, m2, 128, 0, 255).astype(np.uint8)
    return [y1, y2]


# Explicit quantization as onnxruntime's quantize_static writes it (uint8 activations, int8
# per-channel weights, int32 biases): the optimizer fuses the Q/DQ pairs into integer layers.
# Multipliers x_scale * w_scale / y_scale of about 1/2^k, so that many sums land on a rounding
# tie, where the Q/DQ graph's float emulation and integer arithmetic part; small weights, as
# onnxruntime's x86 uint8 x int8 kernels saturate int16 pair sums with full-range ones.
_QDQ = np.random.default_rng(2468)
_qdq_xs, _qdq_ws = np.float32(0.1), np.array([0.05, 0.025, 0.1, 0.0125], np.float32)
_qdq_ys, _qdq_ws2 = np.float32(0.02), np.array([0.05, 0.025, 0.1, 0.0125, 0.2], np.float32)
case("qdq_conv_matmul_u8s8",
     [N("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
      N("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
      N("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
      N("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
      N("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
      N("Relu", ["c"], ["r"]),
      N("QuantizeLinear", ["r", "ys", "yz"], ["y1"]),
      N("DequantizeLinear", ["y1", "ys", "yz"], ["y1d"]),
      N("Flatten", ["y1d"], ["flat"]),
      N("DequantizeLinear", ["w2", "ws2", "wz2"], ["w2d"], axis=1),
      N("DequantizeLinear", ["b2", "bs2", "bz2"], ["b2d"], axis=0),
      N("MatMul", ["flat", "w2d"], ["mm"]),
      N("Add", ["mm", "b2d"], ["g"]),
      N("QuantizeLinear", ["g", "ys2", "yz2"], ["y2"])],
     [("x", _QDQ.uniform(-0.8, 0.8, size=(2, 3, 6, 6)).astype(np.float32))], 13,
     {"xs": _qdq_xs, "xz": np.uint8(128),
      "w": _QDQ.integers(-7, 8, size=(4, 3, 3, 3)).astype(np.int8), "ws": _qdq_ws, "wz": np.zeros(4, np.int8),
      "b": _QDQ.integers(-200, 200, size=4).astype(np.int32), "bs": (_qdq_xs * _qdq_ws).astype(np.float32),
      "bz": np.zeros(4, np.int32),
      "ys": _qdq_ys, "yz": np.uint8(0),
      "w2": _QDQ.integers(-7, 8, size=(144, 5)).astype(np.int8), "ws2": _qdq_ws2, "wz2": np.zeros(5, np.int8),
      "b2": _QDQ.integers(-2000, 2000, size=5).astype(np.int32), "bs2": (_qdq_ys * _qdq_ws2).astype(np.float32),
      "bz2": np.zeros(5, np.int32),
      "ys2": np.float32(0.032), "yz2": np.uint8(128)},
     outputs=("y1", "y2"), expected=qdq_conv_matmul_expected, ort_agrees=True)

if __name__ == "__main__":
    import sys
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    # With arguments, only the named cases are (re)written.
    chosen = [c for c in CASES if len(sys.argv) == 1 or c["name"] in sys.argv[1:]]
    for c in chosen:
        write(c)
    print(f"wrote {len(chosen)} cases")
