"""Read and write Kokoro checkpoints in hexgrad's format; build random weights of the real architecture.

On disk (``kokoro-v1_0.pth``): ``torch.save`` of ``{part: state_dict}`` for the parts ``bert``,
``bert_encoder``, ``predictor``, ``text_encoder``, ``decoder``; keys carry DataParallel's ``module.``
prefix and weight-normed convolutions are stored as ``weight_g``/``weight_v``. A folder holds that
file (any ``*.pth``), ``config.json`` and ``voices/*.pt`` (voice packs: float32 (510, 1, 256), row
``n - 1`` is the style for an utterance of ``n`` phonemes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tts.kokoro import config as kconfig
from tts.kokoro.layers import WN_FLAG
from tts.kokoro.model import PARTS, KokoroModel

# InstanceNorm1d(affine=True) parameters Kokoro-82M was trained without: absent keys keep 1 / 0.
_OPTIONAL_SUFFIXES = (".norm.weight", ".norm.bias")
MODEL_FILE = "kokoro-v1_0.pth"


class CheckpointError(RuntimeError):
    """A Kokoro checkpoint or voice file that cannot be used; the message is one line saying why."""


# ---------------------------------------------------------------------------------------------- building
def build_random(config: dict[str, Any], seed: int = 0, frames_per_token: float = 2.5) -> KokoroModel:
    """Random weights of the real architecture, durations calibrated to about ``frames_per_token``.

    Untrained duration heads predict ~25 frames (0.6 s) per phoneme; the bias of ``duration_proj`` is
    set so a random model speaks at a natural rate (~60 ms a symbol, stress marks and spaces included,
    ~16 a second), which is what sizes the decoder's work in benchmarks.
    """
    torch.manual_seed(seed)
    model = KokoroModel(config)
    proj = model.predictor.duration_proj.linear_layer
    with torch.no_grad():
        proj.weight.mul_(0.05)
        p = frames_per_token / proj.out_features
        proj.bias.fill_(math.log(p / (1 - p)))
    return model.eval()


def random_voice(config: dict[str, Any], seed: int = 0, rows: int = 510) -> torch.Tensor:
    """A voice pack shaped like Kokoro's (rows, 1, 256), with their spread (std ~0.15)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 1, kconfig.style_width(config), generator=gen) * 0.15


# ---------------------------------------------------------------------------------------------- writing
def _weight_norm_prefixes(module: nn.Module) -> set[str]:
    return {name for name, m in module.named_modules() if getattr(m, WN_FLAG, False)}


def part_state_dict(part: nn.Module) -> dict[str, torch.Tensor]:
    """A part's state dict in Kokoro's on-disk form (``module.`` prefix, ``weight_g``/``weight_v``)."""
    wn = _weight_norm_prefixes(part)
    out: dict[str, torch.Tensor] = {}
    for key, value in part.state_dict().items():
        prefix, _, leaf = key.rpartition(".")
        value = value.detach().float().cpu()
        if leaf == "weight" and prefix in wn:
            out[f"module.{prefix}.weight_g"] = torch.norm_except_dim(value, 2, 0)
            out[f"module.{prefix}.weight_v"] = value.clone()
        else:
            out[f"module.{key}"] = value.clone()
    return out


def save_checkpoint(model: KokoroModel, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({name: part_state_dict(getattr(model, name)) for name in PARTS}, path)
    return path


def save_folder(model: KokoroModel, folder: str | Path, voices: dict[str, torch.Tensor]) -> Path:
    """Write ``config.json``, ``kokoro-v1_0.pth`` and ``voices/<name>.pt`` as hexgrad's repository lays them out."""
    folder = Path(folder)
    (folder / "voices").mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config, ensure_ascii=False, indent=2))
    save_checkpoint(model, folder / MODEL_FILE)
    for name, pack in voices.items():
        torch.save(pack.detach().float().cpu().clone(), folder / "voices" / f"{name}.pt")
    return folder


# ---------------------------------------------------------------------------------------------- reading
def _torch_load(path: Path, what: str) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{what} not found: {path}") from None
    except Exception as exc:  # truncated zip, pickle garbage, a text file...
        text = str(exc).strip()
        reason = text.splitlines()[0].split(". ")[0][:160] if text else ""
        if len(reason) < 12:  # a bare key or number says nothing without its type
            reason = f"{type(exc).__name__} {reason}".strip()
        raise CheckpointError(f"{what} {path} is corrupt or not a torch file ({reason})") from None


def load_part(part: nn.Module, saved: dict[str, torch.Tensor], name: str, source: Path) -> None:
    """Copy ``saved`` (Kokoro's on-disk keys) into ``part``; CheckpointError on a missing key or wrong shape."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{source}: part {name!r} is not a state dict")
    sd = {(k[7:] if k.startswith("module.") else k): v for k, v in saved.items()}
    wn = _weight_norm_prefixes(part)
    own = part.state_dict()
    missing: list[str] = []
    for key, target in own.items():
        prefix, _, leaf = key.rpartition(".")
        if key in sd:
            value = sd[key]
        elif leaf == "weight" and prefix in wn and f"{prefix}.weight_g" in sd and f"{prefix}.weight_v" in sd:
            g, v = sd[f"{prefix}.weight_g"].float(), sd[f"{prefix}.weight_v"].float()
            if g.dim() != v.dim():
                raise CheckpointError(f"{source}: {name}.{prefix} weight_g/weight_v ranks differ")
            value = torch._weight_norm(v, g, 0)
        elif key.endswith(_OPTIONAL_SUFFIXES):
            continue
        else:
            missing.append(key)
            continue
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(target.shape):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise CheckpointError(f"{source}: {name}.{key} has shape {shape}, the config expects "
                                  f"{tuple(target.shape)} (wrong config.json for these weights?)")
        with torch.no_grad():
            target.copy_(value.to(target.dtype))
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CheckpointError(f"{source}: part {name!r} lacks {', '.join(missing[:3])}{more}")


def _find_files(source: Path) -> tuple[Path, Path | None]:
    """(weights file, config.json or None) of a folder or a ``.pth`` file."""
    if source.is_dir():
        pths = sorted(source.glob("*.pth"))
        if not pths:
            raise CheckpointError(f"no *.pth weights in {source}")
        if len(pths) > 1:
            preferred = [p for p in pths if p.name == MODEL_FILE]
            if not preferred:
                raise CheckpointError(f"several *.pth in {source}: name one ({', '.join(p.name for p in pths)})")
            pths = preferred
        cfg = source / "config.json"
        return pths[0], cfg if cfg.is_file() else None
    if not source.exists():
        raise CheckpointError(f"Kokoro checkpoint not found: {source}")
    cfg = source.parent / "config.json"
    return source, cfg if cfg.is_file() else None


def read_config(path: Path | None) -> dict[str, Any]:
    """``config.json`` (Kokoro's keys) or, without one, Kokoro-82M v1.0's configuration."""
    if path is None:
        return kconfig.full_config()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    try:
        return kconfig.normalize(raw)
    except kconfig.ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def load_checkpoint(source: str | Path, config: dict[str, Any] | None = None) -> KokoroModel:
    """Load a folder (``config.json`` + ``*.pth``) or a ``.pth`` file onto the CPU, in float32, eval mode."""
    source = Path(source).expanduser()
    weights, cfg_path = _find_files(source)
    cfg = kconfig.normalize(config) if config is not None else read_config(cfg_path)
    saved = _torch_load(weights, "Kokoro weights")
    if not isinstance(saved, dict):
        raise CheckpointError(f"{weights} holds a {type(saved).__name__}, not Kokoro's dict of parts")
    absent = [p for p in PARTS if p not in saved]
    if absent:
        raise CheckpointError(f"{weights} is not a Kokoro checkpoint: no {', '.join(absent)} "
                              f"(found {', '.join(map(str, list(saved)[:5])) or 'nothing'})")
    try:
        model = KokoroModel(cfg)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{cfg_path or 'config'}: cannot build Kokoro from it ({exc})") from None
    for name in PARTS:
        load_part(getattr(model, name), saved[name], name, weights)
    return model.eval()


def load_voice(path: str | Path, config: dict[str, Any]) -> torch.Tensor:
    """A voice pack as (rows, style width) float32."""
    path = Path(path).expanduser()
    pack = _torch_load(path, "Kokoro voice")
    width = kconfig.style_width(config)
    if not isinstance(pack, torch.Tensor) or pack.dim() not in (1, 2, 3) or pack.shape[-1] != width:
        shape = tuple(pack.shape) if isinstance(pack, torch.Tensor) else type(pack).__name__
        raise CheckpointError(f"{path} is not a Kokoro voice pack: {shape}, expected (rows, 1, {width})")
    return pack.float().reshape(-1, width)


def find_voice(source: Path | None, voice: str) -> Path | None:
    """Resolve ``voice`` (a path, or a name under the checkpoint's ``voices/``)."""
    if not voice:
        if source is None:
            return None
        folder = source if source.is_dir() else source.parent
        packs = sorted((folder / "voices").glob("*.pt"))
        return packs[0] if packs else None
    direct = Path(voice).expanduser()
    if direct.suffix == ".pt" or direct.exists():
        return direct
    if source is not None:
        folder = source if source.is_dir() else source.parent
        return folder / "voices" / f"{voice}.pt"
    raise CheckpointError(f"voice {voice!r} is a name but no checkpoint folder is given")
