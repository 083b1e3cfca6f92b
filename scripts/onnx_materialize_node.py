#!/usr/bin/env python3
"""Writes the ONNX backend `node` test cases of the installed onnx package to disk.

onnx >= 1.17 no longer ships them as files: they are generated in memory from
`onnx.backend.test.case`. This writes each case in the classic layout
(`<dest>/<test>/model.onnx`, `data.json` with rtol/atol, `test_data_set_<i>/input_<j>.pb`
and `output_<j>.pb`) and a `.complete` marker holding the onnx version, so a second
call with the same onnx version does nothing.

usage: onnx_materialize_node.py DEST
"""

import json
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def write_value(path, value, type_proto, name):
    """Serializes one value as onnx/backend/test/cmd_tools.py does."""
    if type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def is_complete(dest):
    try:
        with open(os.path.join(dest, ".complete")) as f:
            return json.load(f).get("onnx_version") == onnx.__version__
    except (OSError, ValueError):
        return False


def materialize(dest):
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    partial = dest + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    count = 0
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        case_dir = os.path.join(partial, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        with open(os.path.join(case_dir, "data.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol}, f)
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_set = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(data_set)
            for j, value in enumerate(inputs):
                write_value(os.path.join(data_set, f"input_{j}.pb"), value, graph.input[j].type, graph.input[j].name)
            for j, value in enumerate(outputs):
                write_value(os.path.join(data_set, f"output_{j}.pb"), value, graph.output[j].type, graph.output[j].name)
        count += 1
    with open(os.path.join(partial, ".complete"), "w") as f:
        json.dump({"onnx_version": onnx.__version__, "count": count}, f)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(partial, dest)
    return count


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    dest = os.path.abspath(sys.argv[1])
    if is_complete(dest):
        print(f"onnx node tests of onnx {onnx.__version__} are already in {dest}", file=sys.stderr)
        return
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    count = materialize(dest)
    print(f"wrote {count} onnx {onnx.__version__} node tests to {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
