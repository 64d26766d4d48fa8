"""NeMo ``.nemo`` archives of Parakeet-TDT: read them onto transformers modules, and write them.

A ``.nemo`` file is a tar of ``model_config.yaml``, ``model_weights.ckpt`` (a torch state dict
with NeMo's key names) and the tokenizer files (``<hash>_tokenizer.model`` ...). The key and
config mappings follow transformers' ``convert_nemo_to_hf.py`` for TDT.
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from asr.parakeet._deps import require


class CheckpointError(ValueError):
    """A checkpoint that exists but cannot be used (wrong architecture, corrupt, incomplete)."""


# (NeMo regex, transformers replacement), applied in order
NEMO_TO_HF: list[tuple[str, str]] = [
    (r"^encoder\.pre_encode\.conv\.", "encoder.subsampling.layers."),
    (r"^encoder\.pre_encode\.out\.", "encoder.subsampling.linear."),
    (r"^encoder\.layers\.(\d+)\.conv\.batch_norm\.", r"encoder.layers.\1.conv.norm."),
    (r"\.linear_q\.", ".q_proj."),
    (r"\.linear_k\.", ".k_proj."),
    (r"\.linear_v\.", ".v_proj."),
    (r"\.linear_out\.", ".o_proj."),
    (r"\.linear_pos\.", ".relative_k_proj."),
    (r"\.pos_bias_([uv])$", r".bias_\1"),
    (r"^decoder\.prediction\.embed\.", "decoder.embedding."),
    (r"^decoder\.prediction\.dec_rnn\.lstm\.", "decoder.lstm."),
    (r"^joint\.enc\.", "encoder_projector."),
    (r"^joint\.pred\.", "decoder.decoder_projector."),
    (r"^joint\.joint_net\.2\.", "joint.head."),
]
HF_TO_NEMO: list[tuple[str, str]] = [
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"^encoder\.layers\.(\d+)\.conv\.norm\.", r"encoder.layers.\1.conv.batch_norm."),
    (r"\.q_proj\.", ".linear_q."),
    (r"\.k_proj\.", ".linear_k."),
    (r"\.v_proj\.", ".linear_v."),
    (r"\.o_proj\.", ".linear_out."),
    (r"\.relative_k_proj\.", ".linear_pos."),
    (r"\.bias_([uv])$", r".pos_bias_\1"),
    (r"^decoder\.embedding\.", "decoder.prediction.embed."),
    (r"^decoder\.lstm\.", "decoder.prediction.dec_rnn.lstm."),
    (r"^encoder_projector\.", "joint.enc."),
    (r"^decoder\.decoder_projector\.", "joint.pred."),
    (r"^joint\.head\.", "joint.joint_net.2."),
]
# NeMo buffers with no transformers counterpart (recomputed there)
_SKIP = re.compile(r"^preprocessor\.|^encoder\.pos_enc\.|\.num_batches_tracked$")


def _rename(key: str, rules: list[tuple[str, str]]) -> str:
    for pattern, repl in rules:
        key = re.sub(pattern, repl, key)
    return key


def nemo_to_hf_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {_rename(k, NEMO_TO_HF): v for k, v in state.items() if not _SKIP.search(k)}


def hf_to_nemo_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {_rename(k, HF_TO_NEMO): v for k, v in state.items()}


# ---------------------------------------------------------------------------- configs
def _durations(cfg: dict[str, Any]) -> list[int] | None:
    for section, key in (("decoding", "durations"), ("model_defaults", "tdt_durations")):
        value = (cfg.get(section) or {}).get(key)
        if value:
            return [int(d) for d in value]
    value = ((cfg.get("loss") or {}).get("tdt_kwargs") or {}).get("durations")
    return [int(d) for d in value] if value else None


def _labels(cfg: dict[str, Any]) -> list[str] | None:
    labels = cfg.get("labels") or (cfg.get("joint") or {}).get("vocabulary")
    return list(labels) if labels else None


def nemo_to_hf_config(cfg: dict[str, Any], vocab_size: int | None = None) -> dict[str, Any]:
    """A ``ParakeetTDTConfig`` dict from a NeMo ``model_config.yaml``; raises CheckpointError if not TDT."""
    enc = cfg.get("encoder") or {}
    target = str(cfg.get("target", "")) + str(enc.get("_target_", ""))
    durations = _durations(cfg)
    model_type = str((cfg.get("decoding") or {}).get("model_type", "tdt" if durations else "")).lower()
    if "ctc" in target.lower() and "rnnt" not in target.lower() and "hybrid" not in target.lower():
        raise CheckpointError(f"not a TDT model (a CTC model: {cfg.get('target')})")
    if model_type != "tdt" or not durations:
        raise CheckpointError("not a TDT model: the config names no TDT durations")
    checks = {
        "subsampling": ("dw_striding", enc.get("subsampling", "dw_striding")),
        "self_attention_model": ("rel_pos", enc.get("self_attention_model", "rel_pos")),
        "conv_norm_type": ("batch_norm", enc.get("conv_norm_type", "batch_norm")),
    }
    for key, (want, got) in checks.items():
        if got != want:
            raise CheckpointError(f"unsupported encoder.{key} {got!r} (Parakeet uses {want!r})")
    labels = _labels(cfg)
    n_tokens = len(labels) if labels else vocab_size
    if not n_tokens:
        raise CheckpointError("cannot tell the vocabulary size (no labels in the config, no tokenizer)")
    d_model = int(enc["d_model"])
    use_bias = bool(enc.get("use_bias", True))
    prednet = (cfg.get("decoder") or {}).get("prednet") or {}
    joint_hidden = int(((cfg.get("joint") or {}).get("jointnet") or {}).get("joint_hidden", prednet.get("pred_hidden", 640)))
    pred_hidden = int(prednet.get("pred_hidden", 640))
    if joint_hidden != pred_hidden:
        raise CheckpointError(f"joint_hidden {joint_hidden} != pred_hidden {pred_hidden}: not representable")
    activation = ((cfg.get("joint") or {}).get("jointnet") or {}).get("activation", "relu")
    if activation != "relu":
        raise CheckpointError(f"unsupported joint activation {activation!r}")
    channels = int(enc.get("subsampling_conv_channels", -1))
    encoder_config = {
        "hidden_size": d_model,
        "num_hidden_layers": int(enc["n_layers"]),
        "num_attention_heads": int(enc["n_heads"]),
        "intermediate_size": int(d_model * float(enc.get("ff_expansion_factor", 4))),
        "num_mel_bins": int(enc.get("feat_in", 128)),
        "conv_kernel_size": int(enc.get("conv_kernel_size", 9)),
        "subsampling_factor": int(enc.get("subsampling_factor", 8)),
        "subsampling_conv_channels": d_model if channels == -1 else channels,
        "max_position_embeddings": int(enc.get("pos_emb_max_len", 5000)),
        "scale_input": bool(enc.get("xscaling", True)),
        "attention_bias": use_bias,
        "convolution_bias": use_bias,
        "dropout": 0.0, "dropout_positions": 0.0, "attention_dropout": 0.0,
        "activation_dropout": 0.0, "layerdrop": 0.0,
    }
    pad_id = labels.index("<pad>") if labels and "<pad>" in labels else 0
    max_symbols = ((cfg.get("decoding") or {}).get("greedy") or {}).get("max_symbols", 10)
    return {
        "vocab_size": n_tokens + 1,
        "blank_token_id": n_tokens,
        "pad_token_id": pad_id,
        "decoder_hidden_size": pred_hidden,
        "num_decoder_layers": int(prednet.get("pred_rnn_layers", 2)),
        "durations": durations,
        "hidden_act": "relu",
        "max_symbols_per_step": int(max_symbols or 10),
        "encoder_config": encoder_config,
    }


def hf_to_nemo_config(config: Any, feature: dict[str, Any], labels: list[str], tokenizer_name: str) -> dict[str, Any]:
    """A NeMo-shaped ``model_config.yaml`` dict for a transformers ``ParakeetTDTConfig``."""
    enc = config.encoder_config
    durations = [int(d) for d in config.durations]
    sr = int(feature["sample_rate"])
    return {
        "target": "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel",
        "sample_rate": sr,
        "labels": labels,
        "model_defaults": {"enc_hidden": enc.hidden_size, "pred_hidden": config.decoder_hidden_size,
                           "joint_hidden": config.decoder_hidden_size, "tdt_durations": durations,
                           "num_tdt_durations": len(durations)},
        "tokenizer": {"dir": None, "type": "bpe", "model_path": f"nemo:{tokenizer_name}"},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": sr, "normalize": "per_feature",
            "window_size": feature["win_length"] / sr, "window_stride": feature["hop_length"] / sr,
            "window": "hann", "features": feature["n_mels"], "n_fft": feature["n_fft"],
            "log": True, "frame_splicing": 1, "dither": 1e-5, "pad_to": 0, "pad_value": 0.0,
            "preemph": feature["preemphasis"],
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": enc.num_mel_bins, "feat_out": -1, "n_layers": enc.num_hidden_layers,
            "d_model": enc.hidden_size, "use_bias": bool(enc.attention_bias), "subsampling": "dw_striding",
            "subsampling_factor": enc.subsampling_factor, "subsampling_conv_channels": enc.subsampling_conv_channels,
            "causal_downsampling": False, "ff_expansion_factor": enc.intermediate_size / enc.hidden_size,
            "self_attention_model": "rel_pos", "n_heads": enc.num_attention_heads, "att_context_size": [-1, -1],
            "att_context_style": "regular", "xscaling": bool(enc.scale_input), "untie_biases": True,
            "pos_emb_max_len": enc.max_position_embeddings, "conv_kernel_size": enc.conv_kernel_size,
            "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0, "dropout_att": 0.1,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
            "random_state_sampling": False, "blank_as_pad": True, "vocab_size": len(labels),
            "prednet": {"pred_hidden": config.decoder_hidden_size, "pred_rnn_layers": config.num_decoder_layers,
                        "t_max": None, "dropout": 0.2},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None,
            "num_classes": len(labels), "vocabulary": labels, "num_extra_outputs": len(durations),
            "jointnet": {"joint_hidden": config.decoder_hidden_size, "activation": "relu", "dropout": 0.2,
                         "encoder_hidden": enc.hidden_size, "pred_hidden": config.decoder_hidden_size},
        },
        "decoding": {"strategy": "greedy_batch", "model_type": "tdt", "durations": durations,
                     "greedy": {"max_symbols": int(config.max_symbols_per_step)}},
        "loss": {"loss_name": "tdt", "tdt_kwargs": {"durations": durations}},
    }


# ---------------------------------------------------------------------------- archives
@dataclass
class NemoArchive:
    """The parts of a ``.nemo`` file the engine needs."""

    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]  # NeMo key names
    tokenizer_model: bytes | None  # SentencePiece model file contents
    path: Path


def read_nemo(path: str | Path) -> NemoArchive:
    """Read a ``.nemo`` archive; raise FileNotFoundError or CheckpointError with the reason."""
    yaml = require("yaml")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such .nemo file: {path}")
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                name = Path(info.name).name
                if name == "model_config.yaml" or name.endswith((".ckpt", ".model")):
                    handle = tar.extractfile(info)
                    if handle is None:
                        continue
                    data = handle.read()
                    if len(data) != info.size:
                        raise CheckpointError(f"{path}: truncated archive ({name} is cut short)")
                    members[name] = data
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt .nemo archive ({exc})") from None
    if "model_config.yaml" not in members:
        raise CheckpointError(f"{path}: not a .nemo archive (no model_config.yaml)")
    weights = [n for n in members if n.endswith(".ckpt")]
    if not weights:
        raise CheckpointError(f"{path}: truncated or incomplete archive (no model_weights.ckpt)")
    config = yaml.safe_load(members["model_config.yaml"].decode("utf-8"))
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: model_config.yaml is not a mapping")
    try:
        state = torch.load(io.BytesIO(members[weights[0]]), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged pickle/zip
        raise CheckpointError(f"{path}: cannot read {weights[0]} ({exc})") from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    tokenizer = next((members[n] for n in members if n.endswith("tokenizer.model")), None)
    return NemoArchive(config=config, state_dict=state, tokenizer_model=tokenizer, path=path)


def write_nemo(path: str | Path, config: dict[str, Any], state_dict: dict[str, torch.Tensor],
               tokenizer_model: bytes, tokenizer_name: str) -> Path:
    """Write a ``.nemo`` tar (uncompressed, like NVIDIA's) with NeMo key names."""
    yaml = require("yaml")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = io.BytesIO()
    torch.save(state_dict, weights)
    files = {
        "model_config.yaml": yaml.safe_dump(config, sort_keys=False).encode("utf-8"),
        "model_weights.ckpt": weights.getvalue(),
        tokenizer_name: tokenizer_model,
    }
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
