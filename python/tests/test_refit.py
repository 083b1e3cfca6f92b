"""Refitting engines from Python: new weights by name or layer and role, in place; a
weight-stripped engine runs once refitted."""

import pathlib
import subprocess

import numpy as np
import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "models" / "mnist.onnx")


def image(seed=0):
    return np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)


def kiln_binary():
    return ROOT / "target" / "debug" / "kiln"


def test_named_weights_refit_the_engine_in_place():
    engine = kiln.compile(MNIST, backend="cpu", refit=True)
    x = image()
    before = engine.run({"data": x})["prob"]
    refitter = kiln.Refitter(engine)
    names = refitter.get_all_weights()
    assert names and refitter.get_missing_weights() == []
    # Every weight zeroed: the logits are all 0, the softmax uniform.
    pairs = refitter.get_all()
    assert all(role in ("kernel", "bias", "scale", "shift", "constant") for _, role in pairs)
    for layer, role in pairs:
        if role == "kernel":
            kernel_layer = layer
            break
    else:
        pytest.fail(f"no kernel role among {pairs}")
    for name in names:
        refitter.set_named_weights(name, np.zeros_like(refitter.get_named_weights(name)))
    assert refitter.refit_engine() > 0
    after = engine.run({"data": x})["prob"]
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, np.full((1, 10), 0.1, np.float32), rtol=1e-6)
    # By role too; a wrong shape names the weight.
    with pytest.raises(kiln.KilnError, match="the new ones are f32\\[3\\]"):
        refitter.set_weights(kernel_layer, "kernel", np.zeros(3, np.float32))
    with pytest.raises(kiln.KilnError, match="is not a weights role"):
        refitter.set_weights(kernel_layer, "filter", np.zeros(3, np.float32))


def test_an_engine_built_without_refit_is_refused():
    with pytest.raises(kiln.KilnError, match="built without the REFIT builder flag"):
        kiln.Refitter(kiln.compile(MNIST, backend="cpu"))


def test_a_weight_stripped_engine_runs_once_refitted(tmp_path):
    stripped = tmp_path / "stripped.engine"
    subprocess.run([str(kiln_binary()), "build", MNIST, "--backend", "cpu", "--flag", "refit",
                    "--flag", "strip_weights", "-o", str(stripped), "-q"], check=True)
    engine = kiln.Engine.load(str(stripped))
    assert engine.weight_stripped
    with pytest.raises(kiln.KilnError, match="holds no weights yet"):
        engine.run({"data": image()})
    refitter = kiln.Refitter(engine)
    missing = refitter.get_missing_weights()
    assert missing
    with pytest.raises(kiln.KilnError, match="weights are missing"):
        refitter.refit_engine()
    assert refitter.set_weights_from_onnx(MNIST) >= len(missing)
    assert refitter.get_missing_weights() == []
    assert refitter.refit_engine() > 0
    assert not engine.weight_stripped
    full = kiln.compile(MNIST, backend="cpu")
    x = image(5)
    np.testing.assert_allclose(engine.run({"data": x})["prob"], full.run({"data": x})["prob"], rtol=1e-5)
