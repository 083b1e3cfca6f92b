# Writes tiny_vit_{legacy,dynamo}_s8/model.onnx: a one-layer torchvision VisionTransformer (32 × 32
# images, 16 × 16 patches, hidden 32, 2 heads; nn.MultiheadAttention's packed in-projection)
# exported with a dynamic batch by the legacy and the dynamo exporter as benches/gpu/harness.py
# exports ViT-B/16, then Q/DQ-quantized by onnxruntime's quantize_static as benches/gpu/quant.py
# quantizes it (Conv, MatMul and Gemm; per-channel int8 weights, symmetric int8 activations).
# Run from the repository root on a machine with torch, torchvision and onnxruntime:
#   python engine/onnx/tests/qdq_models/generate_tiny_vit.py
import os, sys
import numpy as np, onnx, torch
from torchvision.models.vision_transformer import VisionTransformer

sys.path.insert(0, "benches/gpu")
import harness, quant  # the exporter and quantizer settings the benches use

here = os.path.dirname(os.path.abspath(__file__))
torch.backends.mha.set_fastpath_enabled(False)  # as harness.vit_b16: the fused path does not export
torch.manual_seed(0)
model = VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10).eval()
torch.nn.init.normal_(model.heads.head.weight, std=0.02)
rng = np.random.default_rng(1)
for exporter in ["legacy", "dynamo"]:
    float_path = f"/tmp/tiny_vit_{exporter}.onnx"
    harness.export(model, ["input"], ["logits"], [rng.standard_normal((2, 3, 32, 32), dtype=np.float32)], float_path, exporter)
    onnx.save(onnx.load(float_path), float_path)  # the dynamo export's external weights folded into one file
    calibration = [{"input": rng.standard_normal((4, 3, 32, 32), dtype=np.float32)} for _ in range(4)]
    os.makedirs(f"{here}/tiny_vit_{exporter}_s8", exist_ok=True)
    quant.quantize_qdq(float_path, f"{here}/tiny_vit_{exporter}_s8/model.onnx", calibration, ["Conv", "MatMul", "Gemm"])
