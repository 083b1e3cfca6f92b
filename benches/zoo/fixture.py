"""`zoo.py fixture`: a small regression fixture (tests/data/zoo layout) from a zoo case.

Without --node the case's files are copied as they are (when small enough). With --node NAME the
graph is cut around that node (onnx.utils.Extractor): the fixture's inputs are the node's
non-constant inputs, computed by onnxruntime on the case's inputs, and its expected outputs are
onnxruntime's values of the node's outputs, so use it where onnxruntime agrees with PyTorch on the
whole model (the case's ort.json says so).
"""

import os
import re
import shutil

import numpy as np

import common


def _size_kb(paths):
    return sum(os.path.getsize(p) for p in paths if os.path.exists(p)) / 1024


def make_fixture(root, case, out, node=None, max_kb=1024):
    case_dir = os.path.join(root, case)
    files = ["model.onnx", "model.onnx.data", "inputs.npz", "expected.npz"]
    src = [os.path.join(case_dir, f) for f in files]
    if node is None:
        size = _size_kb(src)
        if size > max_kb:
            raise SystemExit(f"zoo: {case} is {size:.0f} KB > --max-kb {max_kb}: cut it with --node NAME "
                             "(the node the error names) or write a toy-size factory in tests/data/zoo/export.py")
        os.makedirs(out, exist_ok=True)
        for s, f in zip(src, files):
            if os.path.exists(s):
                shutil.copy(s, os.path.join(out, f))
        return f"copied {case} ({size:.0f} KB) to {out}"
    return _cut(case_dir, out, node, max_kb)


def _cut(case_dir, out, node_name, max_kb):
    import onnx
    import onnx.utils
    import onnxruntime as ort

    ort_result = common.read_json(os.path.join(case_dir, "ort.json"), {})
    agrees = ort_result.get("pass", ort_result.get("rel_l2", 1) <= common.FP32_TOL)  # old ort.json: no `pass`
    if ort_result.get("status") != "ok" or not agrees:
        print(f"zoo: warning: onnxruntime does not match PyTorch on this case ({ort_result.get('status')}, "
              f"rel L2 {ort_result.get('rel_l2')}): the fixture's expected values come from onnxruntime")
    model = onnx.load(os.path.join(case_dir, "model.onnx"))  # external data resolves beside the model
    node = next((n for n in model.graph.node if n.name == node_name), None)
    if node is None:
        close = [n.name for n in model.graph.node if node_name.lower() in n.name.lower()][:10]
        raise SystemExit(f"zoo: no top-level node `{node_name}` (similar: {close})")
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    inputs = [i for i in node.input if i and i not in constants]
    outputs = [o for o in node.output if o]
    # Every wanted tensor as an extra graph output of the full model, then one onnxruntime run.
    graph_outputs = {o.name for o in model.graph.output}
    graph_inputs = {i.name for i in model.graph.input}
    for name in inputs + outputs:
        if name not in graph_outputs and name not in graph_inputs:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with np.load(os.path.join(case_dir, "inputs.npz")) as f:
        feed = {k: f[k] for k in f.files}
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(None, feed)))
    values.update(feed)
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    sub = onnx.utils.Extractor(model).extract_model(inputs, outputs)
    # Plain names for the fixture's inputs and outputs (ONNX names like `/layer1/Conv_output_0`
    # would become awkward npz member paths).
    rename = {n: re.sub(r"\W+", "_", n).strip("_") or f"t{i}" for i, n in enumerate(inputs + outputs)}
    for n in sub.graph.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
        n.output[:] = [rename.get(x, x) for x in n.output]
    for vi in list(sub.graph.input) + list(sub.graph.output):
        vi.name = rename.get(vi.name, vi.name)
    os.makedirs(out, exist_ok=True)
    onnx.save(sub, os.path.join(out, "model.onnx"))
    np.savez(os.path.join(out, "inputs.npz"), **{rename[k]: values[k] for k in inputs})
    np.savez(os.path.join(out, "expected.npz"), **{rename[k]: values[k] for k in outputs})
    size = _size_kb([os.path.join(out, f) for f in ("model.onnx", "inputs.npz", "expected.npz")])
    note = f" (over --max-kb {max_kb}: too large to commit as it is)" if size > max_kb else ""
    return (f"cut `{node_name}` ({node.op_type}) of {os.path.basename(case_dir)}: {len(sub.graph.node)} nodes, "
            f"inputs {inputs}, outputs {outputs}, {size:.0f} KB{note} -> {out}")
