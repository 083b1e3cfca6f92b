"""Type stubs of the extension module kiln._kiln."""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

class KilnError(Exception):
    """A kiln failure; the message says what is wrong."""

TensorInfo = Tuple[str, str, List[Optional[int]]]

# A contiguous CUDA tensor read in place: anything with __dlpack__ and __dlpack_device__
# (PyTorch, CuPy, JAX, DeviceArray) or __cuda_array_interface__ (Numba).
CudaTensor = Any

class DeviceArray:
    """Device memory kiln allocated (device run outputs, Engine.allocate_device, Engine.to_device),
    shared without a copy through DLPack (torch.from_dlpack) and the CUDA array interface."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str:
        """The numpy dtype name ("bfloat16" where numpy has none)."""
    @property
    def device(self) -> int:
        """The CUDA device's ordinal."""
    @property
    def nbytes(self) -> int: ...
    def data_ptr(self) -> int:
        """The device address of the first element."""
    def numpy(self) -> np.ndarray:
        """A host copy (waits for a run still writing it; bfloat16 comes back as float32)."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Version 3; `stream` is the stream a run may still be writing the values on, else None."""
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A "dltensor" capsule sharing the memory; waits for a run on a stream other than `stream`."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(2, ordinal): kDLCUDA."""

class Engine:
    """A built engine, prepared on its backend for running."""

    @staticmethod
    def load(path: str, backend: Optional[str] = None, device: int = 0) -> "Engine":
        """Loads an engine file (`kiln build`) and prepares it on device `device` (cuda's
        ordinal; the other backends have only 0) of the backend it was built for."""
    @staticmethod
    def deserialize(data: bytes, backend: Optional[str] = None, device: int = 0) -> "Engine":
        """An engine from the bytes of an engine file."""
    def serialize(self) -> bytes:
        """The engine file's bytes."""
    def save(self, path: str) -> None:
        """Writes the engine file."""
    @property
    def backend(self) -> str:
        """The backend the engine runs on: cpu, wgpu or cuda."""
    @property
    def device(self) -> int:
        """The device the engine runs on (cuda's ordinal; 0 on the other backends)."""
    @property
    def inputs(self) -> List[TensorInfo]:
        """(name, numpy dtype name, dims) of each input; a dynamic dim is None."""
    @property
    def outputs(self) -> List[TensorInfo]:
        """(name, numpy dtype name, dims) of each output; a dynamic dim is None."""
    @property
    def weight_stripped(self) -> bool:
        """Whether the engine still lacks its weights (a weight-stripped file not yet refitted)."""
    def run(self, inputs: Mapping[str, Union[np.ndarray, CudaTensor]], stream: Optional[int] = None) -> Dict[str, Any]:
        """Runs the engine once. Numpy inputs give numpy outputs (bf16 as float32). CUDA tensors are
        read in place and give DeviceArray outputs, ordered on `stream` (a CUstream int) where
        given, else complete on return; all inputs on the device or all on the host."""
    def create_execution_context(self) -> "ExecutionContext":
        """A new execution context with profile 0 active."""
    def allocate_device(self, shape: Sequence[int], dtype: Any = "float32") -> DeviceArray:
        """Uninitialized device memory on the engine's device (KilnError on host backends)."""
    def to_device(self, array: np.ndarray) -> DeviceArray:
        """A device copy of `array` on the engine's device (KilnError on host backends)."""
    @property
    def num_optimization_profiles(self) -> int: ...
    @property
    def num_io_tensors(self) -> int: ...
    def get_tensor_name(self, index: int) -> str:
        """The name of I/O tensor `index` (inputs first)."""
    def get_tensor_mode(self, name: str) -> str:
        """"input" or "output"."""
    def get_tensor_dtype(self, name: str) -> str:
        """The numpy dtype name of `name`."""
    def get_tensor_shape(self, name: str) -> List[int]:
        """The declared dims of `name`; -1 for a dynamic dim."""
    def get_tensor_profile_shape(self, name: str, profile: int) -> Tuple[List[int], List[int], List[int]]:
        """(min, opt, max) dims of input `name` in optimization profile `profile`."""

class ExecutionContext:
    """One context: its own profile, input shapes and bound arrays."""

    def set_optimization_profile(self, index: int) -> None: ...
    @property
    def active_optimization_profile(self) -> int: ...
    def set_input_shape(self, name: str, shape: Sequence[int]) -> None: ...
    def get_tensor_shape(self, name: str) -> List[int]:
        """Dims of `name` for the shapes set (-1 where not known yet; for an output sized by the
        input values, its dims in the latest device execution)."""
    def set_tensor_address(self, name: str, tensor: Union[np.ndarray, CudaTensor, int]) -> None:
        """Binds a numpy array (for execute()), a contiguous CUDA tensor of the tensor's dtype (kept
        alive while bound) or a device address (int; sized from the dims when executing)."""
    def execute_async_v3(self, stream_handle: int) -> bool:
        """Runs on the device memory bound to every input and output, ordered on the CUstream
        `stream_handle` (0: the legacy default stream). Returns True; failures raise KilnError."""
    def execute_async(self, stream_handle: int) -> bool:
        """execute_async_v3 under its older name."""
    def execute(self) -> Dict[str, np.ndarray]:
        """Runs once, synchronously: on bound numpy arrays, writes the bound outputs and returns every
        output; on bound device memory, returns {} once the outputs are written there."""

class Network:
    """A network definition, filled by an OnnxParser."""

    @property
    def name(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_inputs(self) -> int: ...
    @property
    def num_outputs(self) -> int: ...
    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...

class OnnxParser:
    """Imports an ONNX model into a Network; failures are kept as errors to read."""

    def __init__(self, network: Network) -> None: ...
    def parse_from_file(self, path: str) -> bool: ...
    def parse(self, model: bytes, path: Optional[str] = None) -> bool: ...
    @property
    def num_errors(self) -> int: ...
    def get_error(self, index: int) -> str: ...
    def clear_errors(self) -> None: ...

class OptimizationProfile:
    """Min, opt and max dims of each dynamic input."""

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int], max: Sequence[int]) -> None: ...
    def get_shape(self, input: str) -> Optional[Tuple[List[int], List[int], List[int]]]: ...

class BuilderConfig:
    """Builder flags by name ("fp16", "bf16", "tf32", "refit", "strip_weights", …), profiles, memory budget."""

    def set_flag(self, name: str) -> None: ...
    def clear_flag(self, name: str) -> None: ...
    def get_flag(self, name: str) -> bool: ...
    def add_optimization_profile(self, profile: OptimizationProfile) -> int: ...
    @property
    def num_optimization_profiles(self) -> int: ...
    max_memory: Optional[int]

class Builder:
    """Builds engines for one backend ("auto": the first available of cuda, wgpu, cpu)."""

    def __init__(self, backend: str = "auto", device: int = 0) -> None: ...
    @property
    def backend(self) -> str: ...
    def create_network(self) -> Network: ...
    def create_builder_config(self) -> BuilderConfig: ...
    def create_optimization_profile(self) -> OptimizationProfile: ...
    def build_serialized_network(self, network: Network, config: BuilderConfig) -> bytes: ...
    def build_engine(self, network: Network, config: BuilderConfig) -> Engine: ...

class Runtime:
    """Loads engine files' bytes (on the engine's backend, or `backend` when it matches)."""

    def __init__(self, backend: Optional[str] = None, device: int = 0) -> None: ...
    def deserialize_engine(self, data: bytes) -> Engine: ...
    def deserialize_cuda_engine(self, data: bytes) -> Engine: ...

class Refitter:
    """New weights for an engine built with refit=True (TensorRT's Refitter)."""

    def __init__(self, engine: Engine) -> None:
        """Raises KilnError for an engine built without refit."""
    def set_named_weights(self, name: str, weights: np.ndarray) -> None:
        """Sets the weights named `name` (an ONNX initializer's name)."""
    def set_weights(self, layer: str, role: str, weights: np.ndarray) -> None:
        """Sets the `role` weights (kernel, bias, scale, shift, constant) of `layer`."""
    def set_weights_from_onnx(self, path: str) -> int:
        """Sets every weight the ONNX model has an initializer of the same name for."""
    def get_named_weights(self, name: str) -> np.ndarray:
        """The current value of weights `name` (the new one where set)."""
    def get_all_weights(self) -> List[str]:
        """The names of every refittable weight."""
    def get_missing_weights(self) -> List[str]:
        """The weights still to set before refit_engine() (a weight-stripped engine's)."""
    def get_all(self) -> List[Tuple[str, str]]:
        """(layer, role) of every refittable weight."""
    def get_missing(self) -> List[Tuple[str, str]]:
        """(layer, role) of the weights still to set."""
    def refit_engine(self) -> int:
        """Refits the engine in place; returns how many of its weights blobs changed."""

def compile(
    model: str,
    backend: str = "auto",
    fp16: bool = False,
    bf16: bool = False,
    tf32: bool = True,
    shapes: Optional[Mapping[str, Sequence[int]]] = None,
    refit: bool = False,
    device: int = 0,
) -> Engine:
    """Imports an ONNX model and builds an engine for `backend` (auto: cuda, wgpu, then cpu)
    on device `device` (cuda's ordinal; the other backends have only 0)."""
