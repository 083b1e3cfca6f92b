#!/usr/bin/env python3
"""Writes mini_attention_s8/: one BERT-style self-attention block (query, key and value
projections, the head split, `softmax(Q·Kᵀ / sqrt(d) + mask) · V`, the head merge and the
output projection) quantized by onnxruntime's `quantize_static` as benches/gpu/quant.py
quantizes BERT: QDQ format, int8 symmetric activations and per-channel weights, MatMul
quantized. That writes the attention's scores quantized and dequantized again before the
mask's Add and its probabilities before `· V`: kiln fuses the attention with those levels.
input_0.pb / input_1.pb are the input and the additive mask, output_0.pb onnxruntime's output
with its graph optimizations off (the Q/DQ graph's float emulation as written).

Run from this directory with a Python that has onnx, numpy and onnxruntime:
    python generate_mini_attention.py
"""
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
import onnxruntime

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mini_attention_s8")
rng = np.random.default_rng(0)
BATCH, SEQ, HIDDEN, HEADS = 2, 16, 32, 2
DIM = HIDDEN // HEADS
nodes, inits = [], []


def init(name, a, dtype=np.float32):
    inits.append(numpy_helper.from_array(np.asarray(a, dtype), name))
    return name


def node(op, inputs, name, **attrs):
    nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
    return name


def dense(name, x):
    w = init(name + "_w", rng.normal(0, 1 / np.sqrt(HIDDEN), (HIDDEN, HIDDEN)))
    b = init(name + "_b", rng.normal(0, 0.1, HIDDEN))
    return node("Add", [node("MatMul", [x, w], name + "_mm"), b], name)


heads_shape = init("heads_shape", [0, 0, HEADS, DIM], np.int64)
merged_shape = init("merged_shape", [0, 0, HIDDEN], np.int64)


def split(name, x, perm):
    return node("Transpose", [node("Reshape", [x, heads_shape], name + "_split")], name + "_t", perm=perm)


q = split("q", dense("query", "x"), [0, 2, 1, 3])
k = split("k", dense("key", "x"), [0, 2, 3, 1])
v = split("v", dense("value", "x"), [0, 2, 1, 3])
scores = node("Div", [node("MatMul", [q, k], "qk"), init("sqrt_d", np.sqrt(DIM))], "scaled")
probs = node("Softmax", [node("Add", [scores, "mask"], "masked")], "probs", axis=-1)
context = node("Transpose", [node("MatMul", [probs, v], "pv")], "context_t", perm=[0, 2, 1, 3])
y = dense("output", node("Reshape", [context, merged_shape], "context"))
nodes.append(helper.make_node("Identity", [y], ["y"]))
graph = helper.make_graph(
    nodes, "mini_attention",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", SEQ, HIDDEN]),
     helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", 1, 1, SEQ])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", SEQ, HIDDEN])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8


def feeds(batch):
    mask = np.zeros((batch, 1, 1, SEQ), np.float32)
    mask[:, :, :, SEQ - 3:] = -10000.0  # the last keys are padding, as BERT's extended mask
    return {"x": rng.normal(0, 1, (batch, SEQ, HIDDEN)).astype(np.float32), "mask": mask}


class Batches(CalibrationDataReader):
    def __init__(self):
        self.batches = iter([feeds(4) for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


os.makedirs(HERE, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    fp32 = os.path.join(tmp, "fp32.onnx")
    onnx.save(model, fp32)
    quantize_static(fp32, os.path.join(HERE, "model.onnx"), Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
inputs = feeds(BATCH)
options = onnxruntime.SessionOptions()
options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
session = onnxruntime.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
y = session.run(None, inputs)[0]
tensors = [("input_0.pb", numpy_helper.from_array(inputs["x"], "x")),
           ("input_1.pb", numpy_helper.from_array(inputs["mask"], "mask")),
           ("output_0.pb", numpy_helper.from_array(y, "y"))]
for name, value in tensors:
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(value.SerializeToString())
print("wrote", HERE)
