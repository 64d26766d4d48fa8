"""The decoder's elementwise chains as pure functions, run eagerly or through ``torch.compile``.

Profiling arithmetic (run 17): at large batch the generator is bound by memory traffic of its
elementwise work, not by its convolutions (fp32 and bf16 ran at the same speed). Each AdaIN + Snake
+ mask step is ~20 separate kernels in eager mode, each reading and writing the whole activation
(4.8 kHz x 128 channels, 800 Hz x 256 channels); at batch 1 the same ~20 launches per step make the
pass launch-bound. Here every such step (the residual add before it, the style projection ``fc(s)``,
the masked instance-norm statistics, the style affine, the activation and the mask) is one function
of tensors only; :func:`set_compiled` switches the modules between calling it as plain PyTorch (the
reference, op for op what the layers computed before) and a ``torch.compile(dynamic=True)`` build of
the same function, where Inductor emits one reduction and one pointwise kernel for it. The
convolutions stay cuDNN calls between those functions.

Shapes: batch, channels and frames are symbolic (``dynamic=True``), so new clause lengths do not
recompile; batch 1 and each dtype get their own graph (PyTorch specializes size-1 dimensions), i.e.
a handful of graphs per function, compiled on first use (the engine's warm-up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from asr import compile_cache

log = logging.getLogger(__name__)


def _adain(x: torch.Tensor, s: torch.Tensor, fc_w: torch.Tensor, fc_b: torch.Tensor, norm_w: torch.Tensor,
           norm_b: torch.Tensor, mask: torch.Tensor, count: torch.Tensor, eps: float) -> torch.Tensor:
    """``(1 + gamma) * (instance_norm(x) * w + b) + beta`` over each item's valid frames (statistics in fp32)."""
    gamma, beta = F.linear(s, fc_w, fc_b)[:, :, None].chunk(2, dim=1)
    work = torch.promote_types(x.dtype, torch.float32)
    xf, m = x.to(work), mask.to(work)
    mean = (xf * m).sum(-1, keepdim=True) / count
    centered = (xf - mean) * m
    var = centered.square().sum(-1, keepdim=True) / count
    g1 = (1 + gamma).to(work)
    scale = torch.rsqrt(var + eps) * (g1 * norm_w.to(work)[:, None])
    shift = g1 * norm_b.to(work)[:, None] + beta.to(work)
    return torch.addcmul(shift, centered, scale).to(x.dtype)


def adain(x: torch.Tensor, s: torch.Tensor, fc_w: torch.Tensor, fc_b: torch.Tensor, norm_w: torch.Tensor,
          norm_b: torch.Tensor, mask: torch.Tensor, count: torch.Tensor, eps: float) -> torch.Tensor:
    """AdaIN alone (no activation, no mask on the output)."""
    return _adain(x, s, fc_w, fc_b, norm_w, norm_b, mask, count, eps)


def adain_leaky(x: torch.Tensor, s: torch.Tensor, fc_w: torch.Tensor, fc_b: torch.Tensor, norm_w: torch.Tensor,
                norm_b: torch.Tensor, mask: torch.Tensor, count: torch.Tensor, eps: float,
                slope: float) -> torch.Tensor:
    """``leaky_relu(adain(x), slope) * mask`` (StyleTTS2's AdainResBlk1d)."""
    return F.leaky_relu(_adain(x, s, fc_w, fc_b, norm_w, norm_b, mask, count, eps), slope) * mask


def adain_snake(x: torch.Tensor, s: torch.Tensor, fc_w: torch.Tensor, fc_b: torch.Tensor, norm_w: torch.Tensor,
                norm_b: torch.Tensor, mask: torch.Tensor, count: torch.Tensor, eps: float,
                alpha: torch.Tensor) -> torch.Tensor:
    """``snake(adain(x), alpha) * mask``, Snake being ``x + sin(alpha x)^2 / alpha`` (the generator's)."""
    xt = _adain(x, s, fc_w, fc_b, norm_w, norm_b, mask, count, eps)
    return (xt + (1 / alpha) * torch.sin(alpha * xt) ** 2) * mask


def biased(z: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A convolution's output ``z`` (B, C, T) run without its bias, plus the bias (C,): the add cuDNN's
    convolution makes as a pass of its own over the whole activation, here inside the next fused step."""
    return z + bias[:, None]


def residual_adain_snake(z: torch.Tensor, zb: torch.Tensor, residual: torch.Tensor, s: torch.Tensor,
                         fc_w: torch.Tensor, fc_b: torch.Tensor, norm_w: torch.Tensor, norm_b: torch.Tensor,
                         mask: torch.Tensor, count: torch.Tensor, eps: float,
                         alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = (z + zb) * mask + residual`` (the previous step's output, ``zb`` its convolution's bias) and
    ``adain_snake(x)``: both returned."""
    x = biased(z, zb) * mask + residual
    return x, adain_snake(x, s, fc_w, fc_b, norm_w, norm_b, mask, count, eps, alpha)


def add_source(x: torch.Tensor, z: torch.Tensor, zb: torch.Tensor, residual: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
    """The generator's ``(x + source) * mask``, ``source = (z + zb) * mask + residual`` (the noise resblock's end)."""
    return (x + (biased(z, zb) * mask + residual)) * mask


def mean_leaky(mask: torch.Tensor, slope: float, *parts: torch.Tensor) -> torch.Tensor:
    """``leaky_relu(mean_j((z_j + zb_j) * mask + x_j), slope) * mask`` over the resblocks' ``(z_j, zb_j, x_j)``
    triples: their ends, their average and the next stage's activation in one pass (the mask changes nothing
    where the resblocks' inputs were clean, and makes conv_post's input clean)."""
    total: torch.Tensor | None = None
    for z, zb, x in zip(parts[::3], parts[1::3], parts[2::3], strict=True):
        y = biased(z, zb) * mask + x
        total = y if total is None else total + y
    return F.leaky_relu(total / (len(parts) // 3), slope) * mask  # type: ignore[operator]


EAGER: dict[str, Callable[..., Any]] = {f.__name__: f for f in (adain, adain_leaky, adain_snake,
                                                                 residual_adain_snake, add_source, mean_leaky)}


class Kernels:
    """The functions a model's modules call: eager (``EAGER``) or compiled builds of them.

    A compiled build that raises (an Inductor or Triton failure on some shape) is logged once and that
    function falls back to eager for the rest of the process, so a compile problem costs speed, not audio.
    """

    def __init__(self, compiled: bool = False, mode: str | None = None):
        self.compiled = compiled
        self.mode = mode
        self._fns: dict[str, Callable[..., Any]] = dict(EAGER)
        if compiled:
            compile_cache.restore()
            _configure_dynamo()
            for name, fn in EAGER.items():
                self._fns[name] = _guarded(name, torch.compile(fn, dynamic=True, mode=mode), fn)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self.__dict__["_fns"][name]
        except KeyError:
            raise AttributeError(name) from None


def _guarded(name: str, compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
    state = {"ok": True}

    def call(*args: Any) -> Any:
        if state["ok"]:
            try:
                return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - any compiler failure: keep serving, eagerly
                state["ok"] = False
                log.warning("kokoro: compiled %s failed (%s: %s); running it eagerly from now on", name,
                            type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return eager(*args)

    call.__name__ = f"compiled_{name}"
    return call


def _configure_dynamo() -> None:
    """Process-wide settings that keep the graph count at (function x dtype x batch 1 or not).

    Each function sees a few graphs (a transposed input is one more), so the recompile limit (8) is
    raised so dynamo never gives up on one. Duck sizing is switched off: with it, sizes that happen to be equal when a graph is traced
    (batch 128 and 128 channels, 256 frames and 256 channels) share one symbol, and the next call
    where they differ recompiles mid-serving. Without it every dimension gets its own symbol.
    """
    cfg = torch._dynamo.config
    for key in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, key) and getattr(cfg, key) < 32:
            setattr(cfg, key, 32)
    # Parameters' shapes are static by default, which would pin the channel count (the norm and fc weights
    # are arguments) and build one graph per width (128, 256, 512, 1024, 1090, ...).
    if hasattr(cfg, "force_parameter_static_shapes"):
        cfg.force_parameter_static_shapes = False
    try:
        import torch.fx.experimental._config as fx_config

        fx_config.use_duck_shape = False
    except (ImportError, AttributeError):  # older torch: duck sizing stays (at worst an extra compile)
        pass


EAGER_KERNELS = Kernels(compiled=False)

__all__ = ["EAGER", "EAGER_KERNELS", "Kernels", "adain", "adain_leaky", "adain_snake", "add_source", "mean_leaky",
           "residual_adain_snake"]
