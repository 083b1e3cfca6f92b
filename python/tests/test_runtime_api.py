"""The TensorRT-shaped API: Builder, OnnxParser, BuilderConfig, OptimizationProfile, Runtime
and ExecutionContext, as code written for `tensorrt` uses them; two profiles from two
contexts at once."""

import pathlib
import threading

import numpy as np
import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "models" / "mnist.onnx")
CNN = str(ROOT / "tests" / "data" / "pytorch" / "cnn_torchscript.onnx")


def build_cnn_with_two_profiles():
    builder = kiln.Builder("cpu")
    network = builder.create_network()
    parser = kiln.OnnxParser(network)
    assert parser.parse_from_file(CNN), [parser.get_error(i) for i in range(parser.num_errors)]
    assert network.num_inputs == 1 and network.inputs[0][0] == "image"
    config = builder.create_builder_config()
    for low, high in [(1, 2), (3, 8)]:
        profile = builder.create_optimization_profile()
        profile.set_shape("image", [low, 3, 32, 32], [high, 3, 32, 32], [high, 3, 32, 32])
        config.add_optimization_profile(profile)
    assert config.num_optimization_profiles == 2
    return kiln.Runtime().deserialize_cuda_engine(builder.build_serialized_network(network, config))


def test_the_tensorrt_flow_builds_and_runs_mnist():
    builder = kiln.Builder("cpu")
    network = builder.create_network()
    parser = kiln.OnnxParser(network)
    assert parser.parse_from_file(MNIST)
    config = builder.create_builder_config()
    config.set_flag("fp16")
    assert config.get_flag("fp16") and config.get_flag("tf32")
    config.clear_flag("fp16")
    engine = builder.build_engine(network, config)
    assert engine.num_io_tensors == 2
    assert [engine.get_tensor_name(i) for i in range(2)] == ["data", "prob"]
    assert engine.get_tensor_mode("data") == "input" and engine.get_tensor_mode("prob") == "output"
    assert engine.get_tensor_dtype("prob") == "float32" and engine.get_tensor_shape("prob") == [1, 10]
    context = engine.create_execution_context()
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    out = np.zeros((1, 10), np.float32)
    context.set_tensor_address("data", x)
    context.set_tensor_address("prob", out)
    result = context.execute()
    np.testing.assert_array_equal(out, result["prob"])
    np.testing.assert_array_equal(out, engine.run({"data": x})["prob"])
    assert abs(float(out.sum()) - 1.0) < 1e-5


def test_two_contexts_run_two_profiles_at_once():
    engine = build_cnn_with_two_profiles()
    assert engine.num_optimization_profiles == 2
    assert engine.get_tensor_shape("image") == [-1, 3, 32, 32]
    assert engine.get_tensor_profile_shape("image", 1) == ([3, 3, 32, 32], [8, 3, 32, 32], [8, 3, 32, 32])
    rng = np.random.default_rng(1)
    batches = {0: rng.random((2, 3, 32, 32), dtype=np.float32), 1: rng.random((6, 3, 32, 32), dtype=np.float32)}
    contexts = {}
    for profile, x in batches.items():
        context = engine.create_execution_context()
        context.set_optimization_profile(profile)
        assert context.active_optimization_profile == profile
        context.set_input_shape("image", list(x.shape))
        assert context.get_tensor_shape("image") == list(x.shape)
        context.set_tensor_address("image", x)
        contexts[profile] = context
    results = {}

    def run(profile):
        for _ in range(3):
            results[profile] = contexts[profile].execute()

    threads = [threading.Thread(target=run, args=(p,)) for p in contexts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for profile, x in batches.items():
        (_, got), = results[profile].items()
        assert got.shape[0] == x.shape[0]
    # Samples are independent: profile 1's batch holding profile 0's two gives their logits.
    first = contexts[1]
    first.set_input_shape("image", [3, 3, 32, 32])
    both = np.concatenate([batches[0], batches[0][:1]])
    first.set_tensor_address("image", both)
    (_, logits), = first.execute().items()
    (_, alone), = results[0].items()
    np.testing.assert_allclose(logits[:2], alone, rtol=1e-5, atol=1e-6)


def test_mistakes_are_kiln_errors():
    engine = build_cnn_with_two_profiles()
    context = engine.create_execution_context()
    with pytest.raises(kiln.KilnError, match="optimization profile 2 does not exist"):
        context.set_optimization_profile(2)
    with pytest.raises(kiln.KilnError, match="outside \\[1, 2\\] of optimization profile 0"):
        context.set_input_shape("image", [5, 3, 32, 32])
    with pytest.raises(kiln.KilnError, match="no buffer is bound to `image`"):
        context.execute()
    with pytest.raises(kiln.KilnError, match="is not an input or output"):
        context.set_tensor_address("nope", np.zeros(1, np.float32))
    with pytest.raises(kiln.KilnError, match="unknown builder flag `fp17`"):
        kiln.BuilderConfig().set_flag("fp17")
    network = kiln.Builder("cpu").create_network()
    parser = kiln.OnnxParser(network)
    assert not parser.parse(b"not a model")
    assert parser.num_errors == 1 and "cannot import the ONNX model" in parser.get_error(0)
