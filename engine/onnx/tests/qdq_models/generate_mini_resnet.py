#!/usr/bin/env python3
"""Writes mini_resnet_s8/: a small ResNet (a strided stem, a max pooling, a bottleneck with
an identity skip connection and one with a strided 1x1 downsampling, a 1x1 convolution, a
global pooling and a classifier) quantized by onnxruntime's `quantize_static` as benches/gpu/quant.py quantizes
ResNet-50: QDQ format, int8 symmetric activations and per-channel weights, Conv / MatMul / Gemm
quantized. That writes every convolution's output quantized and dequantized again before its
ReLU (an island kiln folds into the convolution as a second quantization) or skip connection's
Add. input_0.pb is one input, output_0.pb onnxruntime's output for it with its graph
optimizations off: the Q/DQ graph's float emulation as written (onnxruntime's x86 integer
kernels saturate pair sums of full-range int8 weights, so they are no reference here).

Run from this directory with a Python that has onnx, numpy and onnxruntime:
    python generate_mini_resnet.py
"""
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
import onnxruntime

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mini_resnet_s8")
rng = np.random.default_rng(0)
nodes, inits = [], []


def init(name, a):
    inits.append(numpy_helper.from_array(a.astype(np.float32), name))
    return name


def conv(name, x, cin, cout, k, stride=1):
    w = init(name + "_w", rng.normal(0, 1 / np.sqrt(cin * k * k), (cout, cin, k, k)))
    b = init(name + "_b", rng.normal(0, 0.1, cout))
    nodes.append(helper.make_node("Conv", [x, w, b], [name], pads=[k // 2] * 4, strides=[stride] * 2, kernel_shape=[k, k]))
    return name


def relu(x):
    nodes.append(helper.make_node("Relu", [x], [x + "_r"]))
    return x + "_r"


def add(a, b, name):
    nodes.append(helper.make_node("Add", [a, b], [name]))
    return name


x = relu(conv("stem", "x", 3, 16, 3, 2))
nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
x = "pool"
y = relu(conv("b1c1", x, 16, 8, 1))
y = relu(conv("b1c2", y, 8, 8, 3))
x = relu(add(conv("b1c3", y, 8, 16, 1), x, "b1add"))
y = relu(conv("b2c1", x, 16, 16, 1))
y = relu(conv("b2c2", y, 16, 16, 3, 2))
x = relu(add(conv("b2c3", y, 16, 32, 1), conv("b2down", x, 16, 32, 1, 2), "b2add"))
x = relu(conv("head", x, 32, 32, 1))
nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
nodes.append(helper.make_node("MatMul", ["flat", init("fc_w", rng.normal(0, 0.2, (32, 10)))], ["mm"]))
nodes.append(helper.make_node("Add", ["mm", init("fc_b", rng.normal(0, 0.1, 10))], ["y"]))
graph = helper.make_graph(nodes, "mini_resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8


class Batches(CalibrationDataReader):
    def __init__(self):
        self.batches = iter([{"x": rng.normal(0, 1, (4, 3, 32, 32)).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


os.makedirs(HERE, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    fp32 = os.path.join(tmp, "fp32.onnx")
    onnx.save(model, fp32)
    quantize_static(fp32, os.path.join(HERE, "model.onnx"), Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul", "Gemm"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
x = rng.normal(0, 1, (2, 3, 32, 32)).astype(np.float32)
options = onnxruntime.SessionOptions()
options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
session = onnxruntime.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
y = session.run(None, {"x": x})[0]
for name, value in [("input_0.pb", numpy_helper.from_array(x, "x")), ("output_0.pb", numpy_helper.from_array(y, "y"))]:
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(value.SerializeToString())
print("wrote", HERE)
