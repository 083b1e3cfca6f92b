"""JSON files of the zoo's results, written atomically; no numpy needed to read them (the
report steps run without it), numpy values written as plain numbers and lists."""

import json
import os


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_json(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=_jsonable)
    os.replace(tmp, path)


def _jsonable(x):
    # numpy scalars and arrays have tolist() (a Python number or list), without importing numpy.
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)
