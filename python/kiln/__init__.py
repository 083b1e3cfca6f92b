"""kiln: build and run inference engines from Python.

    import kiln, numpy as np
    engine = kiln.compile("model.onnx", backend="cpu")       # or kiln.Engine.load("m.engine")
    outputs = engine.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

Failures raise kiln.KilnError with kiln's message.
"""

from ._kiln import (
    Builder,
    BuilderConfig,
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
