"""Load a Parakeet-TDT checkpoint onto transformers' ``ParakeetForTDT``: a folder, a ``.nemo``, a Hub id.

``load_parakeet(source)`` accepts a transformers-format folder (``config.json`` +
safetensors + ``tokenizer.model`` or ``tokenizer.json``), a ``.nemo`` archive, or a Hub id
(downloaded when the Hub is reachable). ``convert_nemo`` writes a ``.nemo`` as such a folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from asr.parakeet.features import FeatureConfig
from asr.parakeet.nemo_format import CheckpointError, nemo_to_hf_config, nemo_to_hf_state_dict, read_nemo
from asr.parakeet.tokenizer import SentencePieceTokenizer, Tokenizer, load_tokenizer

__all__ = ["CheckpointError", "ParakeetCheckpoint", "convert_nemo", "load_parakeet", "parse_dtype"]

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


@dataclass
class ParakeetCheckpoint:
    """A loaded model (eval mode), its tokenizer and its front-end parameters."""

    model: torch.nn.Module  # transformers ParakeetForTDT
    tokenizer: Tokenizer
    features: FeatureConfig
    source: str

    @property
    def frame_seconds(self) -> float:
        """Seconds per encoder frame (hop x subsampling / sample rate; 0.08 for Parakeet)."""
        enc = self.model.config.encoder_config
        return self.features.hop_length * enc.subsampling_factor / self.features.sample_rate


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r} (float32, bfloat16)") from None


def load_parakeet(
    source: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype = torch.float32
) -> ParakeetCheckpoint:
    """Load a folder, a ``.nemo`` file or a Hub id; raise FileNotFoundError / CheckpointError clearly."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        ckpt = _load_any(source)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    ckpt.model.to(device=torch.device(device), dtype=parse_dtype(dtype))
    return ckpt


def _load_any(source: str | Path) -> ParakeetCheckpoint:
    path = Path(source)
    if path.is_dir():
        ckpt = _load_folder(path)
    elif path.is_file():
        ckpt = _load_nemo(path)
    elif _looks_like_hub_id(str(source)):
        ckpt = _load_folder(_download(str(source)))
    else:
        raise FileNotFoundError(f"no such checkpoint: {source} (a folder, a .nemo file or a Hub id)")
    return ckpt


def _looks_like_hub_id(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text)) and not text.endswith(".nemo")


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id))
    except Exception as exc:  # offline, unknown repo, auth...
        raise FileNotFoundError(f"{repo_id}: not a local path, and the Hub download failed ({exc})") from None


def _load_folder(folder: Path) -> ParakeetCheckpoint:
    from transformers import ParakeetForTDT

    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder}: no config.json (not a transformers checkpoint folder)")
    config = json.loads(config_file.read_text())
    model_type = config.get("model_type")
    if model_type != "parakeet_tdt":
        raise CheckpointError(f"{folder}: wrong architecture {model_type!r}; Cadence needs 'parakeet_tdt'")
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise FileNotFoundError(f"{folder}: no weights (*.safetensors)")
    try:
        model = ParakeetForTDT.from_pretrained(folder, dtype=torch.float32).eval()
    except (OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{folder}: cannot load the weights ({exc})") from None
    tokenizer = load_tokenizer(folder, vocab_size=model.config.vocab_size - 1)
    pre = folder / "preprocessor_config.json"
    features = FeatureConfig.from_hf(json.loads(pre.read_text())) if pre.is_file() else FeatureConfig(
        n_mels=model.config.encoder_config.num_mel_bins)
    return _checked(ParakeetCheckpoint(model, tokenizer, features, str(folder)))


def _load_nemo(path: Path) -> ParakeetCheckpoint:
    from transformers import ParakeetForTDT, ParakeetTDTConfig

    archive = read_nemo(path)
    if archive.tokenizer_model is None:
        raise CheckpointError(f"{path}: no SentencePiece tokenizer (*tokenizer.model) in the archive")
    tokenizer = SentencePieceTokenizer.from_bytes(archive.tokenizer_model)
    config = ParakeetTDTConfig(**nemo_to_hf_config(archive.config, vocab_size=tokenizer.vocab_size))
    with torch.device("meta"):
        model = ParakeetForTDT(config)
    state = nemo_to_hf_state_dict(archive.state_dict)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit a Parakeet-TDT of this config "
            f"(missing {missing[:4]}{'...' if len(missing) > 4 else ''}, unexpected {unexpected[:4]})")
    _materialize_buffers(model)
    model.eval()
    _set_generation_defaults(model)
    features = FeatureConfig.from_nemo(archive.config.get("preprocessor") or {})
    return _checked(ParakeetCheckpoint(model, tokenizer, features, str(path)))


def _materialize_buffers(model: torch.nn.Module) -> None:
    """Recreate buffers a state dict does not carry (left on the meta device by ``assign=True``)."""
    for module in model.modules():
        for name, buf in list(module._buffers.items()):
            if buf is None or not buf.is_meta:
                continue
            if name == "inv_freq" and hasattr(module, "compute_default_relative_positional_parameters"):
                module._buffers[name] = module.compute_default_relative_positional_parameters(module.config)
            elif name == "num_batches_tracked":
                module._buffers[name] = torch.zeros((), dtype=torch.long)
            else:
                raise CheckpointError(f"buffer {name} of {type(module).__name__} is not in the checkpoint")


def _set_generation_defaults(model: torch.nn.Module) -> None:
    """What transformers' converter sets: start from blank; never pick a duration logit as a token."""
    config, gen = model.config, model.generation_config
    gen.decoder_start_token_id = config.blank_token_id
    gen.pad_token_id = config.pad_token_id
    gen.suppress_tokens = list(range(config.vocab_size, config.vocab_size + len(config.durations)))


def _checked(ckpt: ParakeetCheckpoint) -> ParakeetCheckpoint:
    config = ckpt.model.config
    if ckpt.tokenizer.vocab_size != config.vocab_size - 1:
        raise CheckpointError(
            f"{ckpt.source}: tokenizer has {ckpt.tokenizer.vocab_size} tokens, the model {config.vocab_size - 1}")
    if ckpt.features.n_mels != config.encoder_config.num_mel_bins:
        raise CheckpointError(
            f"{ckpt.source}: features give {ckpt.features.n_mels} mels, the encoder takes "
            f"{config.encoder_config.num_mel_bins}")
    return ckpt


def convert_nemo(nemo_path: str | Path, out_dir: str | Path) -> Path:
    """Write a ``.nemo`` archive as a transformers-format folder (weights, config, tokenizer, features)."""
    ckpt = _load_nemo(Path(nemo_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt.model.save_pretrained(out)
    assert isinstance(ckpt.tokenizer, SentencePieceTokenizer)
    (out / "tokenizer.model").write_bytes(ckpt.tokenizer.model_bytes)
    ckpt.features.save_hf(out)
    try:
        from transformers.convert_slow_tokenizer import ParakeetConverter

        ParakeetConverter(str(out / "tokenizer.model")).converted().save(str(out / "tokenizer.json"))
    except Exception:  # protobuf missing or mismatched: tokenizer.model is enough
        pass
    return out
