"""The kiln Python package on cpu: compile, run, save/load, errors, dtypes."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "models" / "mnist.onnx")
CNN = str(ROOT / "tests" / "data" / "pytorch" / "cnn_torchscript.onnx")


def image(seed=0):
    return np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)


def test_compile_and_run_gives_a_softmax():
    engine = kiln.compile(MNIST, backend="cpu")
    assert engine.backend == "cpu"
    assert engine.inputs == [("data", "float32", [1, 1, 28, 28])]
    assert engine.outputs == [("prob", "float32", [1, 10])]
    out = engine.run({"data": image()})
    assert list(out) == ["prob"]
    prob = out["prob"]
    assert prob.dtype == np.float32 and prob.shape == (1, 10)
    assert abs(float(prob.sum()) - 1.0) < 1e-5


def test_an_engine_saved_and_loaded_runs_the_same(tmp_path):
    engine = kiln.compile(MNIST, backend="cpu")
    path = tmp_path / "mnist.engine"
    engine.save(str(path))
    loaded = kiln.Engine.load(str(path))
    again = kiln.Engine.deserialize(engine.serialize())
    x = image(3)
    want = engine.run({"data": x})["prob"]
    np.testing.assert_array_equal(loaded.run({"data": x})["prob"], want)
    np.testing.assert_array_equal(again.run({"data": x})["prob"], want)
    # Non-contiguous input views are read in logical order.
    wide = np.zeros((1, 1, 28, 56), np.float32)
    wide[..., ::2] = x
    np.testing.assert_array_equal(engine.run({"data": wide[..., ::2]})["prob"], want)


def test_the_engine_matches_the_kiln_command(tmp_path):
    """The same engine file through the CLI's run gives the same numbers."""
    kiln_bin = ROOT / "target" / "debug" / "kiln"
    if not kiln_bin.exists():
        pytest.skip("target/debug/kiln is not built")
    engine = kiln.compile(MNIST, backend="cpu")
    engine.save(str(tmp_path / "m.engine"))
    x = image(5)
    np.savez(tmp_path / "in.npz", data=x)
    subprocess.run([str(kiln_bin), "run", str(tmp_path / "m.engine"), "--inputs", str(tmp_path / "in.npz"),
                    "--save-outputs", str(tmp_path / "out.npz"), "-q"], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["prob"], engine.run({"data": x})["prob"])


def test_dynamic_dims_are_none_and_shapes_fix_them():
    engine = kiln.compile(CNN, backend="cpu", shapes={"image": [2, 3, 32, 32]})
    name, dtype, dims = engine.inputs[0]
    assert (name, dtype, dims) == ("image", "float32", [None, 3, 32, 32])
    out = engine.run({"image": np.ones((2, 3, 32, 32), np.float32)})
    assert out["probs"].shape[0] == 2


def test_failures_raise_kiln_error_with_the_message(tmp_path):
    engine = kiln.compile(MNIST, backend="cpu")
    with pytest.raises(kiln.KilnError, match="must be f32"):
        engine.run({"data": image().astype(np.float64)})
    with pytest.raises(kiln.KilnError, match="data"):
        engine.run({})
    with pytest.raises(kiln.KilnError, match="must be a numpy array"):
        engine.run({"data": [[1.0]]})
    with pytest.raises(kiln.KilnError, match="cannot read engine file"):
        kiln.Engine.load(str(tmp_path / "missing.engine"))
    with pytest.raises(kiln.KilnError, match="not a kiln engine file|bad magic"):
        kiln.Engine.deserialize(b"definitely not an engine")
    with pytest.raises(kiln.KilnError, match="backend `tpu` is not available: kiln has no backend of that name"):
        kiln.compile(MNIST, backend="tpu")
    with pytest.raises(kiln.KilnError, match="cannot import ONNX model"):
        kiln.compile(str(tmp_path / "missing.onnx"), backend="cpu")
    assert issubclass(kiln.KilnError, Exception)


def test_the_package_says_its_version():
    assert kiln.__version__.count(".") == 2
    assert "Engine" in kiln.__all__ and repr(kiln.compile(MNIST, backend="cpu")).startswith("kiln.Engine(backend=\"cpu\"")
