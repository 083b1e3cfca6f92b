"""kiln: build and run inference engines from Python.

    import kiln, numpy as np
    engine = kiln.compile("model.onnx", backend="cpu")       # or kiln.Engine.load("m.engine")
    outputs = engine.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

On the cuda backend, CUDA tensors (PyTorch, CuPy: anything with __dlpack__ or
__cuda_array_interface__) run in place: engine.run({"input": x}) returns kiln.DeviceArray
outputs (torch.from_dlpack shares them), and ExecutionContext.set_tensor_address(name, x) with
execute_async_v3(stream) runs on the caller's stream, as in TensorRT.

Failures raise kiln.KilnError with kiln's message.
"""

from ._kiln import (
    Builder,
    BuilderConfig,
    DeviceArray,
    Engine,
    ExecutionContext,
    KilnError,
    Network,
    OnnxParser,
    OptimizationProfile,
    Refitter,
    Runtime,
    __version__,
    compile,
)

__all__ = [
    "Builder",
    "BuilderConfig",
    "DeviceArray",
    "Engine",
    "ExecutionContext",
    "KilnError",
    "Network",
    "OnnxParser",
    "OptimizationProfile",
    "Refitter",
    "Runtime",
    "compile",
    "__version__",
]
