"""Writes clip_swish.onnx: x[2,3] -> kiln.examples::ClipC(lo=-1, hi=2) -> kiln.examples::Swish(beta=1.5) -> y.

A model with custom-domain nodes, run by the plugin tests once both example plugins are loaded.
Run with a Python that has `onnx`: python make_clip_swish.py
"""
import onnx
from onnx import TensorProto, helper

nodes = [
    helper.make_node("ClipC", ["x"], ["clipped"], domain="kiln.examples", lo=-1.0, hi=2.0),
    helper.make_node("Swish", ["clipped"], ["y"], domain="kiln.examples", beta=1.5),
]
graph = helper.make_graph(
    nodes,
    "clip_swish",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("kiln.examples", 1)])
model.ir_version = 8
onnx.save(model, "clip_swish.onnx")
