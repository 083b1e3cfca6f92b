"""Zero-copy device tensors on the cuda backend, with PyTorch: Engine.run on CUDA tensors returns
DeviceArrays that torch.from_dlpack shares, and an ExecutionContext bound to torch tensors (or
their raw pointers) runs on torch's stream with execute_async_v3, as TensorRT does. The host
run (Engine.run on numpy arrays) gives the expected values. Skipped without PyTorch and a GPU."""

import gc
import pathlib

import numpy as np
import pytest

import kiln

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    pytest.skip("needs PyTorch with a CUDA GPU", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "models" / "mnist.onnx")


@pytest.fixture(scope="module")
def engine():
    return kiln.compile(MNIST, backend="cuda")


def image(seed):
    return np.random.default_rng(seed).random((1, 1, 28, 28), dtype=np.float32)


def expected(engine, x):
    return engine.run({"data": x})["prob"]


class CudaArrayInterfaceOnly:
    """A CUDA tensor seen only through its __cuda_array_interface__ (as Numba's arrays are)."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def test_run_on_a_torch_tensor_gives_device_arrays_that_torch_shares(engine):
    x = image(0)
    want = expected(engine, x)
    out = engine.run({"data": torch.from_numpy(x).cuda()})["prob"]
    assert isinstance(out, kiln.DeviceArray)
    assert (out.shape, out.dtype, out.device, out.nbytes) == ((1, 10), "float32", torch.cuda.current_device(), 40)
    shared = torch.from_dlpack(out)
    assert shared.is_cuda and shared.data_ptr() == out.data_ptr()
    np.testing.assert_allclose(shared.cpu().numpy(), want, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-4)
    # The CUDA array interface shares it too.
    assert torch.as_tensor(out, device="cuda").data_ptr() == out.data_ptr()
    # torch's tensor keeps the memory alive once the DeviceArray is gone.
    del out
    gc.collect()
    torch.cuda.synchronize()
    np.testing.assert_allclose(shared.cpu().numpy(), want, atol=1e-4)


def test_every_producer_protocol_and_stream_gives_the_host_values(engine):
    x = image(1)
    want = expected(engine, x)
    on_device = torch.from_numpy(x).cuda()
    for given in [CudaArrayInterfaceOnly(on_device), engine.to_device(x)]:
        np.testing.assert_allclose(engine.run({"data": given})["prob"].numpy(), want, atol=1e-4)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        doubled = on_device * 2  # pending on `side` when kiln is handed it
        out = engine.run({"data": doubled}, stream=side.cuda_stream)["prob"]
        assert out.__cuda_array_interface__["stream"] == side.cuda_stream
        on_side = torch.from_dlpack(out) * 1  # the same stream: ordered, no wait
        assert out.__cuda_array_interface__["stream"] == side.cuda_stream
    # A consumer on the default stream: kiln waits for `side` first.
    on_default = torch.from_dlpack(out)
    assert out.__cuda_array_interface__["stream"] is None
    want = expected(engine, x * 2)
    np.testing.assert_allclose(on_default.cpu().numpy(), want, atol=1e-4)
    side.synchronize()
    np.testing.assert_allclose(on_side.cpu().numpy(), want, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-4)


def test_execute_async_v3_writes_into_torch_tensors_on_torchs_stream(engine):
    x = image(2)
    want = expected(engine, x)
    context = engine.create_execution_context()
    data = torch.from_numpy(x).cuda()
    prob = torch.zeros((1, 10), device="cuda")
    address = prob.data_ptr()
    context.set_tensor_address("data", data)
    context.set_tensor_address("prob", prob)
    stream = torch.cuda.current_stream()
    assert context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    assert prob.data_ptr() == address
    np.testing.assert_allclose(prob.cpu().numpy(), want, atol=1e-4)
    assert context.get_tensor_shape("prob") == [1, 10]

    # Raw pointers, as TensorRT code binds them; execute() waits for the run.
    prob.zero_()
    context.set_tensor_address("data", data.data_ptr())
    context.set_tensor_address("prob", prob.data_ptr())
    assert context.execute() == {}
    np.testing.assert_allclose(prob.cpu().numpy(), want, atol=1e-4)

    # Memory that is not the GPU's is refused by the backend, by address.
    host = torch.zeros((1, 10))
    context.set_tensor_address("prob", host.data_ptr())
    with pytest.raises(kiln.KilnError, match="not device memory"):
        context.execute_async_v3(stream.cuda_stream)


def test_torch_tensors_kiln_cannot_read_in_place_are_refused(engine):
    x = torch.from_numpy(image(3)).cuda()
    with pytest.raises(kiln.KilnError, match="`data` is a float16 device tensor but the engine's `data` is float32"):
        engine.run({"data": x.half()})
    with pytest.raises(kiln.KilnError, match="`data` is not contiguous"):
        engine.run({"data": x.transpose(2, 3)})
    with pytest.raises(kiln.KilnError, match="all inputs on the device or all on the host|`data` is a host array"):
        context = engine.create_execution_context()
        context.set_tensor_address("data", image(3))
        context.set_tensor_address("prob", torch.zeros((1, 10), device="cuda"))
        context.execute_async_v3(0)
