"""Writes mnist.onnx and mnist_expected.npz next to this script.

The model is the MNIST network of TensorRT's sampleMNISTAPI, with the same layers and the
same closed-formula weights as `kiln_examples::mnist_network` (examples/src/lib.rs):

    weights(count, fan_in, seed)[i] = float32(2 / sqrt(fan_in) * sin(0.37 * i + seed))

computed in float64 and rounded to float32 once. `mnist_expected.npz` holds a deterministic
input image (`data`, a drawn "1") and onnxruntime's output for it (`prob`), so Rust tests
can compare kiln against onnxruntime without Python.

Run:  /tmp/venv/bin/python examples/models/make_mnist.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def sine_weights(count, fan_in, seed):
    i = np.arange(count, dtype=np.float64)
    return (2.0 / np.sqrt(fan_in) * np.sin(0.37 * i + seed)).astype(np.float32)


def digit_one():
    """The synthetic digit of `kiln_examples::digit_one_image`: a slanted stroke with a flag."""
    img = np.zeros((28, 28), dtype=np.float32)
    for row in range(4, 24):
        col = 14 - (row - 4) // 8
        img[row, col] = 1.0
        img[row, col + 1] = 0.5
    for k in range(4):
        img[7 - k, 11 + k] = 1.0
    return img.reshape(1, 1, 28, 28)


def build_model():
    conv1_w = sine_weights(20 * 1 * 5 * 5, 1 * 5 * 5, 1.0).reshape(20, 1, 5, 5)
    conv1_b = sine_weights(20, 1 * 5 * 5, 2.0)
    conv2_w = sine_weights(50 * 20 * 5 * 5, 20 * 5 * 5, 3.0).reshape(50, 20, 5, 5)
    conv2_b = sine_weights(50, 20 * 5 * 5, 4.0)
    ip1_w = sine_weights(500 * 800, 800, 5.0).reshape(500, 800)
    ip1_b = sine_weights(500, 800, 6.0).reshape(1, 500)
    ip2_w = sine_weights(10 * 500, 500, 7.0).reshape(10, 500)
    ip2_b = sine_weights(10, 500, 8.0)

    initializers = [
        numpy_helper.from_array(conv1_w, "conv1_w"),
        numpy_helper.from_array(conv1_b, "conv1_b"),
        numpy_helper.from_array(conv2_w, "conv2_w"),
        numpy_helper.from_array(conv2_b, "conv2_b"),
        numpy_helper.from_array(np.array([1, 800], dtype=np.int64), "flat_shape"),
        # MatMul computes x @ W, so the [500, 800] kiln weights are stored transposed.
        numpy_helper.from_array(np.ascontiguousarray(ip1_w.T), "ip1_w_t"),
        numpy_helper.from_array(ip1_b, "ip1_b"),
        numpy_helper.from_array(ip2_w, "ip2_w"),
        numpy_helper.from_array(ip2_b, "ip2_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["data", "conv1_w", "conv1_b"], ["conv1"], kernel_shape=[5, 5], strides=[1, 1]),
        helper.make_node("MaxPool", ["conv1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], kernel_shape=[5, 5], strides=[1, 1]),
        helper.make_node("MaxPool", ["conv2"], ["pool2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["pool2", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "ip1_w_t"], ["ip1_mm"]),
        helper.make_node("Add", ["ip1_mm", "ip1_b"], ["ip1"]),
        helper.make_node("Relu", ["ip1"], ["relu1"]),
        helper.make_node("Gemm", ["relu1", "ip2_w", "ip2_b"], ["ip2"], transB=1),
        helper.make_node("Softmax", ["ip2"], ["prob"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mnist",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln make_mnist.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    model = build_model()
    onnx_path = os.path.join(HERE, "mnist.onnx")
    onnx.save(model, onnx_path)

    import onnxruntime as ort

    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    data = digit_one()
    (prob,) = session.run(["prob"], {"data": data})
    np.savez(os.path.join(HERE, "mnist_expected.npz"), data=data, prob=prob)
    print("wrote", onnx_path, "and mnist_expected.npz; prob =", np.array2string(prob[0], precision=4))


if __name__ == "__main__":
    main()
