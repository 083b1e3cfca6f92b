"""Device tensors without a GPU: how kiln reads CUDA tensor objects (DLPack capsules, the CUDA
array interface, raw addresses), what it refuses and why, and that cpu engines say clearly that
they cannot run on device memory. The memory addresses here are made up: every case fails
before anything would touch them. test_device_io.py runs the same paths on a GPU."""

import ctypes
import gc
import pathlib
import sys

import numpy as np
import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "models" / "mnist.onnx")
BERT = str(ROOT / "tests" / "data" / "pytorch" / "bert_dynamo.onnx")
LOOP = str(ROOT / "tests" / "data" / "pytorch" / "loop_list.onnx")
FAKE_ADDRESS = 0x7F00_0000_0000
NOT_ON_CPU = "backend `cpu` cannot run on device memory: it runs on host memory"
NO_ALLOCATION_ON_CPU = "backend `cpu` cannot allocate device memory: it runs on host memory"


@pytest.fixture(scope="module")
def mnist():
    return kiln.compile(MNIST, backend="cpu")


class FakeCudaArray:
    """A CUDA tensor as the CUDA array interface describes one (as Numba or CuPy do)."""

    def __init__(self, shape, typestr="<f4", strides=None, readonly=False, stream=None):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": typestr, "data": (FAKE_ADDRESS, readonly),
            "strides": strides, "stream": stream,
        }


# DLPack v0.8's structs, to make capsules as a CUDA producer (PyTorch, CuPy) does.
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
CAPSULE_NAME = b"dltensor"  # must outlive the capsules
capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaDLPack:
    """A DLPack producer of CUDA memory; records the streams it is asked for and its deleter's calls."""

    def __init__(self, shape, dtype=(2, 32), strides=None, device_type=2):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides else None
        self.deleted = 0
        self.streams = []
        self.deleter = DELETER(self._delete)
        self.managed = DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.device, t.ndim = FAKE_ADDRESS, DLDevice(device_type, 0), len(shape)
        t.dtype = DLDataType(dtype[0], dtype[1], 1)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        self.managed.deleter = self.deleter

    def _delete(self, _managed):
        self.deleted += 1

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return capsule_new(ctypes.addressof(self.managed), CAPSULE_NAME, None)

    def __dlpack_device__(self):
        return (self.managed.dl_tensor.device.device_type, 0)


class HostDLPack:
    """A host tensor that only speaks DLPack (as a PyTorch CPU tensor does)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_cpu_engines_refuse_device_tensors_clearly(mnist):
    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.run({"data": FakeCudaArray((1, 1, 28, 28))})
    context = mnist.create_execution_context()
    context.set_tensor_address("data", FakeCudaArray((1, 1, 28, 28)))
    context.set_tensor_address("prob", FakeCudaArray((1, 10)))
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute_async_v3(0)
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute()


def test_device_arrays_cannot_be_made_on_cpu(mnist):
    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.allocate_device((1, 10), "float32")
    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.to_device(np.zeros((1, 10), np.float32))
    with pytest.raises(TypeError):
        kiln.DeviceArray()


def test_device_tensors_must_be_contiguous_and_of_the_engines_dtype(mnist):
    context = mnist.create_execution_context()
    transposed = FakeCudaArray((1, 1, 28, 28), strides=(3136, 3136, 4, 112))
    with pytest.raises(kiln.KilnError, match=r"`data` is not contiguous \(shape \[1, 1, 28, 28\], strides \[3136, 3136, 4, 112\] in bytes\)"):
        context.set_tensor_address("data", transposed)
    with pytest.raises(kiln.KilnError, match="`data` is not contiguous"):
        mnist.run({"data": transposed})
    # Row-major strides given explicitly are fine (and then it is the backend that refuses).
    context.set_tensor_address("data", FakeCudaArray((1, 1, 28, 28), strides=(3136, 3136, 112, 4)))
    with pytest.raises(kiln.KilnError, match="`data` is a float16 device tensor but the engine's `data` is float32"):
        context.set_tensor_address("data", FakeCudaArray((1, 1, 28, 28), typestr="<f2"))
    with pytest.raises(kiln.KilnError, match="`data` is a float16 device tensor"):
        mnist.run({"data": FakeCudaArray((1, 1, 28, 28), typestr="<f2")})
    with pytest.raises(kiln.KilnError, match='`data` is of typestr ">f4", which kiln has no type for'):
        context.set_tensor_address("data", FakeCudaArray((1, 1, 28, 28), typestr=">f4"))
    with pytest.raises(kiln.KilnError, match="output `prob` is bound to read-only device memory"):
        context.set_tensor_address("prob", FakeCudaArray((1, 10), readonly=True))


def test_dlpack_capsules_are_consumed_and_their_deleter_called_once(mnist):
    producer = FakeCudaDLPack((1, 1, 28, 28))
    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.run({"data": producer})
    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.run({"data": producer}, stream=0x1234)
    # The consumer's stream, as DLPack numbers it: the legacy default stream is 1.
    assert producer.streams == [1, 0x1234]
    assert producer.deleted == 2
    # A bound tensor is kept until it is replaced.
    context = mnist.create_execution_context()
    context.set_tensor_address("data", producer)
    assert producer.deleted == 2
    context.set_tensor_address("data", np.zeros((1, 1, 28, 28), np.float32))
    assert producer.deleted == 3
    context.set_tensor_address("data", producer)
    del context
    gc.collect()
    assert producer.deleted == 4


def test_dlpack_tensors_are_checked_like_any_device_tensor(mnist):
    checks = [
        (FakeCudaDLPack((1, 1, 28, 28), strides=(784, 784, 1, 28)), r"`data` is not contiguous .* in elements"),
        (FakeCudaDLPack((1, 1, 28, 28), dtype=(2, 16)), "`data` is a float16 device tensor"),
        (FakeCudaDLPack((1, 1, 28, 28), dtype=(5, 64)), r"`data` is of DLPack type \(code 5, 64 bits, 1 lanes\)"),
        (FakeCudaDLPack((1, 1, 28, 28), device_type=3), "`data` is on DLPack device type 3"),
    ]
    for producer, message in checks:
        with pytest.raises(kiln.KilnError, match=message):
            mnist.run({"data": producer})
        assert producer.deleted == (0 if producer.streams == [] else 1)
    # A capsule renamed "used_dltensor" by an earlier consumer is not taken twice.
    producer = FakeCudaDLPack((1, 1, 28, 28))
    capsule = producer.__dlpack__()

    class Replay:
        def __dlpack__(self, stream=None):
            return capsule

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(kiln.KilnError, match=NO_ALLOCATION_ON_CPU):
        mnist.run({"data": Replay()})
    with pytest.raises(kiln.KilnError, match="not a \"dltensor\" \\(consumed already\\)"):
        mnist.run({"data": Replay()})
    assert producer.deleted == 1


def test_host_dlpack_tensors_take_the_host_path(mnist):
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    want = mnist.run({"data": x})["prob"]
    np.testing.assert_array_equal(mnist.run({"data": HostDLPack(x)})["prob"], want)
    context = mnist.create_execution_context()
    out = np.zeros((1, 10), np.float32)
    context.set_tensor_address("data", HostDLPack(x))
    context.set_tensor_address("prob", HostDLPack(out))
    context.execute()
    np.testing.assert_array_equal(out, want)
    # numpy's own capsule (kDLCPU) behind a CUDA device claim is read and refused, and released.
    before = sys.getrefcount(x)

    class Liar:
        def __dlpack__(self, stream=None):
            return x.__dlpack__()

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(kiln.KilnError, match=r"`data`: its DLPack tensor is on device type 1, not CUDA \(2\)"):
        mnist.run({"data": Liar()})
    assert sys.getrefcount(x) == before


def test_raw_device_addresses_are_sized_from_the_dims(mnist):
    context = mnist.create_execution_context()
    context.set_tensor_address("data", 12345)
    with pytest.raises(kiln.KilnError, match="no device memory is bound to `prob`"):
        context.execute_async_v3(0)
    context.set_tensor_address("prob", 67890)
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute_async_v3(0)
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute_async(0)
    with pytest.raises(kiln.KilnError, match=r"the device address is 0 \(NULL\)"):
        context.set_tensor_address("data", 0)
    with pytest.raises(kiln.KilnError, match="must be a numpy array, a CUDA tensor .* or a device address \\(int\\); got a list"):
        context.set_tensor_address("data", [1.0])
    loop = kiln.compile(LOOP, backend="cpu").create_execution_context()
    loop.set_tensor_address("x", 1000)
    loop.set_tensor_address("stacked", 2000)
    loop.set_tensor_address("concatenated", 3000)
    with pytest.raises(kiln.KilnError, match=r"`x` is bound to a raw device address, sized from its dims, which are \[-1, 2, 4\]: set every input's shape first"):
        loop.execute_async_v3(0)
    loop.set_input_shape("x", [3, 2, 4])
    with pytest.raises(kiln.KilnError, match=r"output `stacked` has dims \[-1, 2, 8\] known only after running"):
        loop.execute_async_v3(0)


def test_outputs_sized_by_values_cannot_be_allocated_by_run():
    loop = kiln.compile(LOOP, backend="cpu")
    with pytest.raises(kiln.KilnError, match=r"output `stacked` has dims \[-1, 2, 8\] that depend on the input values"):
        loop.run({"x": FakeCudaArray((3, 2, 4))})


def test_host_and_device_tensors_do_not_mix():
    bert = kiln.compile(BERT, backend="cpu")
    ids = np.zeros((2, 16), np.int64)
    mixed = "`input_ids` is a host array but other tensors are in CUDA device memory"
    with pytest.raises(kiln.KilnError, match=mixed):
        bert.run({"input_ids": ids, "attention_mask": FakeCudaArray((2, 16), typestr="<i8")})
    context = bert.create_execution_context()
    context.set_tensor_address("input_ids", ids)
    context.set_tensor_address("attention_mask", FakeCudaArray((2, 16), typestr="<i8"))
    context.set_tensor_address("hidden", FakeCudaArray((2, 16, 64)))
    context.set_tensor_address("pooled", FakeCudaArray((2, 64)))
    with pytest.raises(kiln.KilnError, match=mixed):
        context.execute()
    with pytest.raises(kiln.KilnError, match=mixed):
        context.execute_async_v3(0)


def test_dynamic_inputs_take_their_device_tensors_dims_unless_set():
    cnn = kiln.compile(str(ROOT / "tests" / "data" / "pytorch" / "cnn_torchscript.onnx"), backend="cpu")
    context = cnn.create_execution_context()
    context.set_tensor_address("image", FakeCudaArray((2, 3, 32, 32)))
    context.set_tensor_address("probs", FakeCudaArray((8, 10)))
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute_async_v3(0)
    assert context.get_tensor_shape("image") == [2, 3, 32, 32]
    assert context.get_tensor_shape("probs") == [2, 10]
    context.set_input_shape("image", [1, 3, 32, 32])
    with pytest.raises(kiln.KilnError, match=NOT_ON_CPU):
        context.execute_async_v3(0)
    assert context.get_tensor_shape("image") == [1, 3, 32, 32]


def test_a_device_ordinal_past_a_backends_devices_is_refused():
    with pytest.raises(kiln.KilnError, match="backend `cpu` is not available: it runs on one device, 0; there is no device 1"):
        kiln.compile(MNIST, backend="cpu", device=1)
    engine = kiln.compile(MNIST, backend="cpu")
    assert engine.device == 0
    with pytest.raises(kiln.KilnError, match="there is no device 2"):
        kiln.Engine.deserialize(engine.serialize(), device=2)
    with pytest.raises(kiln.KilnError, match="there is no device 1"):
        kiln.Builder("cpu", device=1)
