# Writes tiny_bert_dynamo_s8/model.onnx: a one-layer BERT (hidden 64, 4 heads, vocabulary 64)
# exported by PyTorch's dynamo exporter (the default since PyTorch 2.9) with a dynamic batch,
# then Q/DQ-quantized by onnxruntime's quantize_static as benches/gpu/quant.py quantizes
# BERT-base (MatMul and Gemm, per-channel int8 weights, symmetric int8 activations).
# Run from the repository root on a machine with torch, transformers and onnxruntime:
#   python engine/onnx/tests/qdq_models/generate_tiny_bert_dynamo.py
import os, sys
import numpy as np, onnx, torch
from transformers import BertConfig, BertModel
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

sys.path.insert(0, "benches/gpu")
import harness  # the exporter settings the benches use

here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = BertConfig(vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                            max_position_embeddings=32)
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


rng = np.random.default_rng(0)


def feed(n):
    return [rng.integers(0, 64, (n, 16)).astype(np.int64), np.ones((n, 16), np.int64)]


float_path = "/tmp/tiny_bert_dynamo.onnx"
harness.export(Encoder().eval(), ["input_ids", "attention_mask"], ["hidden"], feed(2), float_path, "dynamo")
onnx.save(onnx.load(float_path), float_path)  # the external weights folded into one file


class Batches(CalibrationDataReader):
    def __init__(self):
        self.it = iter([dict(zip(["input_ids", "attention_mask"], feed(4))) for _ in range(4)])

    def get_next(self):
        return next(self.it, None)


os.makedirs(f"{here}/tiny_bert_dynamo_s8", exist_ok=True)
quantize_static(float_path, f"{here}/tiny_bert_dynamo_s8/model.onnx", Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
