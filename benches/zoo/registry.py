"""The zoo's models: torchvision, timm and transformers, random weights, eval mode.

Every entry's builder takes the batch size and returns a ModelCase: (module, example_inputs,
input_names, output_names, dynamic_axes_info, tolerance_note). Builders import their library
lazily, so listing the registry needs none of them. Weights are drawn in export_case.py after a
fixed `torch.manual_seed`, which then also re-draws zero-initialised parameters.
"""

import zlib
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

ModelCase = namedtuple("ModelCase", "module inputs input_names output_names dynamic_axes tolerance")


@dataclass
class Spec:
    name: str  # "<family prefix>.<model>", e.g. "tv.resnet18"
    family: str
    build: Callable[[int], ModelCase]
    dynamic_ok: bool = True  # False: only static (batch 1) cases
    note: str = ""
    # Documented fp32 tolerance for models PyTorch itself computes loosely (None: the default 1e-4).
    fp32_tol: Optional[float] = None
    tags: list = field(default_factory=list)


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def _image(name, batch, size):
    import torch

    h, w = (size, size) if isinstance(size, int) else size
    return torch.from_numpy(rng_for(name).standard_normal((batch, 3, h, w), dtype=np.float32))


def _batch_axes(input_names, output_names, extra=None):
    axes = {n: {0: "batch"} for n in list(input_names) + list(output_names)}
    axes.update(extra or {})
    return axes


def _select(module, key):
    """Wraps a module returning a dict to return its entry `key` alone."""
    import torch

    class Select(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, x):
            return self.inner(x)[key]

    return Select()


# ---------------------------------------------------------------- torchvision

TV_SIZE = {"inception_v3": 299, "maxvit_t": 224}
TV_EXTRA = {"inception_v3": {"aux_logits": False, "init_weights": True},
            "googlenet": {"aux_logits": False, "init_weights": True}}
TV_SMALL = 64  # every torchvision CNN ends in adaptive pooling: 64x64 is accepted and fast


def _tv_size(name):
    if name in TV_SIZE:
        return TV_SIZE[name]
    if name.startswith(("vit_", "swin")):
        return 224  # ViT's position embedding is sized for 224; Swin's windows want it
    return TV_SMALL


def _tv_classifier(name):
    def build(batch):
        import torchvision

        module = torchvision.models.get_model(name, weights=None, **TV_EXTRA.get(name, {}))
        x = _image(name, batch, _tv_size(name))
        return ModelCase(module, (x,), ["input"], ["logits"], _batch_axes(["input"], ["logits"]), None)

    return build


def _tv_segmentation(name):
    def build(batch):
        import torchvision

        inner = torchvision.models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)
        module = _select(inner, "out")
        x = _image(name, batch, 96)
        return ModelCase(module, (x,), ["input"], ["out"], _batch_axes(["input"], ["out"]), None)

    return build


def _tv_detection(name, size, **kwargs):
    def build(batch):
        import torch
        import torchvision

        inner = torchvision.models.get_model(name, weights=None, weights_backbone=None, **kwargs)

        class Detect(torch.nn.Module):
            """One image in, (boxes, scores, labels) of that image out."""

            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                det = self.inner(list(x))[0]
                return det["boxes"], det["scores"], det["labels"]

        x = _image(name, batch, size).clamp(-2, 2) * 0.25 + 0.5
        note = {"note": "detection: data-dependent box count, sorted scores; small differences may reorder boxes"}
        return ModelCase(Detect(), (x,), ["images"], ["boxes", "scores", "labels"], {}, note)

    return build


def torchvision_specs():
    import torchvision

    specs = []
    for name in torchvision.models.list_models(module=torchvision.models):
        specs.append(Spec(f"tv.{name}", "torchvision", _tv_classifier(name)))
    for name in ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"):
        specs.append(Spec(f"tvseg.{name}", "torchvision-seg", _tv_segmentation(name)))
    specs.append(Spec("tvdet.ssdlite320_mobilenet_v3_large", "torchvision-det",
                      _tv_detection("ssdlite320_mobilenet_v3_large", 320, score_thresh=0.0, detections_per_img=20),
                      dynamic_ok=False, note="a list of images: no batch dim to make dynamic"))
    specs.append(Spec("tvdet.fasterrcnn_mobilenet_v3_large_320_fpn", "torchvision-det",
                      _tv_detection("fasterrcnn_mobilenet_v3_large_320_fpn", 320, box_score_thresh=0.0,
                                    box_detections_per_img=20),
                      dynamic_ok=False, note="a list of images: no batch dim to make dynamic"))
    return specs


# ---------------------------------------------------------------- timm

# name -> input size (None: the model's pretrained_cfg input size, which fixed-size models need).
TIMM_MODELS = {
    "deit_tiny_patch16_224": None, "mixer_s16_224": None, "coatnet_0_rw_224": None, "convnextv2_atto": 64,
    "efficientnetv2_rw_t": 64, "tf_efficientnetv2_b0": 64, "repvgg_a0": 64, "mobilevit_xxs": None,
    "levit_128s": None, "poolformer_s12": 64, "resmlp_12_224": None, "cait_xxs24_224": None, "pvt_v2_b0": None,
    "ghostnet_100": 64, "edgenext_xx_small": None, "fastvit_t8": None, "efficientformer_l1": None,
    "xcit_nano_12_p16_224": None, "crossvit_tiny_240": None, "tiny_vit_5m_224": None,
    "mobilenetv4_conv_small": 64, "eva02_tiny_patch14_224": None, "hgnetv2_b0": 64, "mambaout_femto": 64,
    "regnetz_b16": 64, "dla34": 64, "res2net50_26w_4s": 64, "hrnet_w18_small": 64, "nfnet_l0": 64,
    "gcvit_xxtiny": None, "twins_svt_small": None, "inception_next_tiny": 64, "coat_tiny": None,
}


def _timm(name, size):
    def build(batch):
        import timm

        if not timm.is_model(name):
            raise LookupError(f"timm {timm.__version__} has no model `{name}`")
        module = timm.create_model(name, pretrained=False)
        s = size or tuple(module.pretrained_cfg["input_size"][1:])
        x = _image(name, batch, s)
        return ModelCase(module, (x,), ["input"], ["logits"], _batch_axes(["input"], ["logits"]), None)

    return build


def timm_specs():
    return [Spec(f"timm.{n}", "timm", _timm(n, s)) for n, s in TIMM_MODELS.items()]


# ---------------------------------------------------------------- transformers

SEQ = 16
VOCAB = 1000
SMALL = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)


def _tokens(name, batch, seq=SEQ, vocab=VOCAB, mask=True):
    """input_ids (int64) and an attention mask whose first row pads its last 4 positions."""
    import torch

    rng = rng_for(name)
    ids = torch.from_numpy(rng.integers(3, vocab, size=(batch, seq), dtype=np.int64))
    if not mask:
        return (ids,)
    m = np.ones((batch, seq), dtype=np.int64)
    m[0, -4:] = 0
    return ids, torch.from_numpy(m)


def _hf_text(name, config_fn, model_cls, attr, mask=True, eager=True, out="hidden"):
    """A text model taking (input_ids[, attention_mask]) and returning one tensor."""

    def build(batch):
        import torch
        import transformers

        config = config_fn(transformers)
        cls = getattr(transformers, model_cls)
        kwargs = {"attn_implementation": "eager"} if eager else {}
        inner = cls._from_config(config, **kwargs)

        class Text(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask=None):
                kw = {"attention_mask": attention_mask} if attention_mask is not None else {}
                if hasattr(self.inner.config, "use_cache"):
                    kw["use_cache"] = False
                return getattr(self.inner(input_ids=input_ids, **kw), attr)

        inputs = _tokens(name, batch, mask=mask)
        names = ["input_ids", "attention_mask"][: len(inputs)]
        return ModelCase(Text(), inputs, names, [out], _batch_axes(names, [out]), None)

    return build


def _hf_seq2seq(name, config_fn, model_cls):
    """Encoder-decoder: (input_ids, attention_mask) in, logits out; decoder_input_ids fixed inside."""

    def build(batch):
        import torch
        import transformers

        config = config_fn(transformers)
        inner = getattr(transformers, model_cls)._from_config(config, attn_implementation="eager")
        dec = torch.from_numpy(rng_for(name + "/decoder").integers(3, VOCAB, size=(1, 8), dtype=np.int64))

        class Seq2Seq(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner
                self.register_buffer("decoder_input_ids", dec)

            def forward(self, input_ids, attention_mask):
                d = self.decoder_input_ids.expand(input_ids.shape[0], -1)
                return self.inner(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=d,
                                  use_cache=False).logits

        inputs = _tokens(name, batch)
        names = ["input_ids", "attention_mask"]
        return ModelCase(Seq2Seq(), inputs, names, ["logits"], _batch_axes(names, ["logits"]), None)

    return build


def _hf_pixels(name, config_fn, model_cls, shape, input_name="pixel_values", part=None):
    """An image (or spectrogram) model returning its last hidden state; `part`: a submodule
    (e.g. Whisper's `encoder`) to take alone."""

    def build(batch):
        import torch
        import transformers

        config = config_fn(transformers)
        inner = getattr(transformers, model_cls)._from_config(config, attn_implementation="eager")
        if part:
            inner = getattr(inner, part)

        class Pixels(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x).last_hidden_state

        x = torch.from_numpy(rng_for(name).standard_normal((batch,) + shape, dtype=np.float32))
        return ModelCase(Pixels(), (x,), [input_name], ["hidden"], _batch_axes([input_name], ["hidden"]), None)

    return build


def _decoder_cfg(cls, **extra):
    def fn(t):
        kw = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=512, max_position_embeddings=128)
        kw.update(extra)
        return getattr(t, cls)(**kw)

    return fn


def transformers_specs():
    bertish = dict(vocab_size=VOCAB, max_position_embeddings=64, **SMALL)
    S = Spec
    return [
        S("hf.bert", "transformers", _hf_text("hf.bert", lambda t: t.BertConfig(**bertish), "BertModel",
                                              "last_hidden_state")),
        S("hf.roberta", "transformers", _hf_text("hf.roberta", lambda t: t.RobertaConfig(**bertish),
                                                 "RobertaModel", "last_hidden_state")),
        S("hf.distilbert", "transformers", _hf_text(
            "hf.distilbert", lambda t: t.DistilBertConfig(vocab_size=VOCAB, dim=256, n_layers=2, n_heads=4,
                                                          hidden_dim=512, max_position_embeddings=64),
            "DistilBertModel", "last_hidden_state")),
        S("hf.albert", "transformers", _hf_text("hf.albert", lambda t: t.AlbertConfig(embedding_size=128, **bertish),
                                                "AlbertModel", "last_hidden_state")),
        S("hf.electra", "transformers", _hf_text("hf.electra", lambda t: t.ElectraConfig(embedding_size=128, **bertish),
                                                 "ElectraModel", "last_hidden_state")),
        S("hf.gpt2", "transformers", _hf_text(
            "hf.gpt2", lambda t: t.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=256, n_layer=2, n_head=4,
                                               bos_token_id=1, eos_token_id=2),
            "GPT2LMHeadModel", "logits", out="logits")),
        S("hf.t5_encoder", "transformers", _hf_text(
            "hf.t5_encoder", lambda t: t.T5Config(vocab_size=VOCAB, d_model=256, d_kv=64, d_ff=512, num_layers=2,
                                                  num_heads=4), "T5EncoderModel", "last_hidden_state")),
        S("hf.t5", "transformers", _hf_seq2seq(
            "hf.t5", lambda t: t.T5Config(vocab_size=VOCAB, d_model=256, d_kv=64, d_ff=512, num_layers=2,
                                          num_decoder_layers=2, num_heads=4, decoder_start_token_id=0),
            "T5ForConditionalGeneration")),
        S("hf.bart", "transformers", _hf_seq2seq(
            "hf.bart", lambda t: t.BartConfig(vocab_size=VOCAB, d_model=256, encoder_layers=2, decoder_layers=2,
                                              encoder_attention_heads=4, decoder_attention_heads=4,
                                              encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=64),
            "BartForConditionalGeneration")),
        S("hf.vit", "transformers", _hf_pixels(
            "hf.vit", lambda t: t.ViTConfig(image_size=64, patch_size=16, **SMALL), "ViTModel", (3, 64, 64))),
        S("hf.clip_text", "transformers", _hf_text(
            "hf.clip_text", lambda t: t.CLIPTextConfig(vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=1,
                                              eos_token_id=2, pad_token_id=0, **SMALL),
            "CLIPTextModel", "last_hidden_state")),
        S("hf.clip_vision", "transformers", _hf_pixels(
            "hf.clip_vision", lambda t: t.CLIPVisionConfig(image_size=96, patch_size=16, **SMALL),
            "CLIPVisionModel", (3, 96, 96))),
        S("hf.whisper_encoder", "transformers", _hf_pixels(
            "hf.whisper_encoder", lambda t: t.WhisperConfig(
                vocab_size=VOCAB, num_mel_bins=80, d_model=256, encoder_layers=2, encoder_attention_heads=4,
                decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
                max_source_positions=32, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, decoder_start_token_id=1),
            "WhisperModel", (80, 64), input_name="input_features", part="encoder"),
          note="encoder only (WhisperModel.encoder), 64 mel frames"),
        S("hf.llama", "transformers", _hf_text("hf.llama", _decoder_cfg("LlamaConfig"), "LlamaForCausalLM", "logits",
                                               out="logits")),
        S("hf.mistral", "transformers", _hf_text("hf.mistral", _decoder_cfg("MistralConfig", sliding_window=8),
                                                 "MistralForCausalLM", "logits", out="logits")),
        S("hf.qwen2", "transformers", _hf_text("hf.qwen2", _decoder_cfg("Qwen2Config"), "Qwen2ForCausalLM", "logits",
                                               out="logits")),
    ]


def all_specs():
    """Every model, in a fixed order (the order decides which models get all four cases)."""
    specs = []
    for part in (torchvision_specs, timm_specs, transformers_specs):
        try:
            specs.extend(part())
        except ImportError as e:  # a missing library: its models are absent, the rest still run
            print(f"zoo: {part.__name__} unavailable: {e}")
    return specs

