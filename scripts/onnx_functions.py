#!/usr/bin/env python3
"""Writes engine/onnx/src/onnx_functions.pb: the function bodies the ONNX standard defines
for its ops (onnx 1.23.2), which kiln's importer inlines for ops it has no builder for.

A ModelProto whose `functions` hold one FunctionProto per (op, since_version) of the
default domain, named `Op:since_version`, with the op's attribute defaults in `attribute_proto`. Run with a Python that has onnx 1.23.2:
    python3 scripts/onnx_functions.py
"""
import os
import onnx
import onnx.defs

assert onnx.__version__ == "1.23.2", onnx.__version__
model = onnx.ModelProto()
for schema in sorted(onnx.defs.get_all_schemas_with_history(), key=lambda s: (s.name, s.since_version)):
    if schema.domain != "" or not schema.has_function:
        continue
    body = schema.function_body
    body.name = f"{schema.name}:{schema.since_version}"
    # The op's attribute defaults, which body references fall back to.
    given = {a.name for a in body.attribute_proto}
    for name, attr in sorted(schema.attributes.items()):
        default = attr.default_value
        if name not in given and default.type != onnx.AttributeProto.UNDEFINED:
            default.name = name
            body.attribute_proto.append(default)
    model.functions.append(body)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "onnx", "src", "onnx_functions.pb")
with open(out, "wb") as f:
    f.write(model.SerializeToString())
print(f"wrote {len(model.functions)} function bodies to {os.path.normpath(out)}")
