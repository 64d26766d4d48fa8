"""Kokoro's building blocks with padding-aware forwards, parameter names as in hexgrad's ``kokoro`` package.

Every module here keeps the parameter layout of its counterpart in ``kokoro.modules`` /
``kokoro.istftnet`` (so a real ``kokoro-v1_0.pth`` loads into it), but its forward takes a
:class:`Span` telling each batch item's valid length. Padded positions are zeroed before every
convolution and excluded from every instance-norm statistic, and bidirectional LSTMs see each item's own
length (:func:`masked_lstm`: device lengths only, so CUDA graphs can hold them), so a padded batch
computes, for each item, what Kokoro computes for that item alone.

Convention: a block's input and output are *clean* (zeros past each item's length).
Weight-normed layers are plain convolutions flagged with :func:`weight_normed`; the checkpoint
reader folds ``weight_g``/``weight_v`` into ``weight`` (inference never recomputes the norm).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tts.kokoro.fused import EAGER_KERNELS, Kernels

WN_FLAG = "_kokoro_weight_norm"
_INV_SQRT2 = float(torch.rsqrt(torch.tensor(2.0)))  # Kokoro's torch.rsqrt(torch.tensor(2))


def weight_normed(module: nn.Module) -> nn.Module:
    """Mark ``module``'s ``weight`` as stored as ``weight_g``/``weight_v`` (torch weight_norm, dim 0) on disk."""
    setattr(module, WN_FLAG, True)
    return module


def device_ints(values: list[int], device: torch.device) -> torch.Tensor:
    """Host integers on ``device`` without a stream sync (a blocking copy would wait for queued kernels)."""
    return torch.tensor(values, dtype=torch.int64).to(device, non_blocking=True)


@dataclass
class Span:
    """Valid lengths of a padded batch at one time resolution.

    ``mask`` is (B, 1, T) in the activation dtype (1 valid, 0 padding); ``count`` (B, 1, 1) float32;
    ``lens`` (B,) int64 on the device. ``lengths`` are the same on the host, or None for a span built on
    the device alone (:meth:`of_lens`, what a captured CUDA graph uses: no host value enters it).
    """

    lengths: list[int] | None
    mask: torch.Tensor
    count: torch.Tensor
    lens: torch.Tensor

    @classmethod
    def of(cls, lengths: list[int], total: int, device: torch.device, dtype: torch.dtype) -> Span:
        span = cls.of_lens(device_ints(lengths, device), total, dtype)
        span.lengths = list(lengths)
        return span

    @classmethod
    def of_lens(cls, lens: torch.Tensor, total: int, dtype: torch.dtype) -> Span:
        """From device lengths ``lens`` (B,) int64: device operations only (capturable in a CUDA graph)."""
        mask = (torch.arange(total, device=lens.device)[None, :] < lens[:, None]).to(dtype)[:, None, :]
        return cls(None, mask, lens.to(torch.float32).clamp(min=1)[:, None, None], lens)

    @property
    def total(self) -> int:
        return int(self.mask.shape[-1])

    def bool_mask(self) -> torch.Tensor:
        """(B, T) True where padded (Kokoro's ``text_mask`` convention)."""
        return self.mask[:, 0, :] == 0

    def to(self, dtype: torch.dtype) -> Span:
        return Span(self.lengths, self.mask.to(dtype), self.count, self.lens)


class LayerNorm(nn.Module):
    """Channel layer norm of (B, C, T) with ``gamma``/``beta`` (kokoro.modules.LayerNorm)."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, -1), (self.channels,), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


class AdaLayerNorm(nn.Module):
    """Style-conditioned layer norm over channels of (B, T, C)."""

    def __init__(self, style_dim: int, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.fc = nn.Linear(style_dim, channels * 2)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.fc(s)[:, None, :].chunk(2, dim=-1)
        return (1 + gamma) * F.layer_norm(x, (self.channels,), eps=self.eps) + beta


class AdaIN1d(nn.Module):
    """Style-conditioned instance norm; ``norm`` keeps InstanceNorm1d's (affine) parameter names.

    The arithmetic lives in :mod:`tts.kokoro.fused` (``kernels``: eager, or compiled by
    ``KokoroModel.set_compiled``); :meth:`args` packs this module's share of a fused call.
    """

    kernels: Kernels = EAGER_KERNELS

    def __init__(self, style_dim: int, num_features: int):
        super().__init__()
        self.norm = nn.InstanceNorm1d(num_features, affine=True)
        self.fc = nn.Linear(style_dim, num_features * 2)

    def args(self, s: torch.Tensor, span: Span) -> tuple:
        """``(s, fc weight, fc bias, norm weight, norm bias, mask, count, eps)`` for the fused functions."""
        return (s, self.fc.weight, self.fc.bias, self.norm.weight, self.norm.bias, span.mask, span.count,
                float(self.norm.eps))

    def forward(self, x: torch.Tensor, s: torch.Tensor, span: Span) -> torch.Tensor:
        """``(1 + gamma) * (norm(x) * w + b) + beta``, the affine parts folded into one scale and shift."""
        return self.kernels.adain(x, *self.args(s, span))


def _conv(c_in: int, c_out: int, k: int, **kw) -> nn.Conv1d:
    return weight_normed(nn.Conv1d(c_in, c_out, k, **kw))  # type: ignore[return-value]


class AdainResBlk1d(nn.Module):
    """StyleTTS2's AdaIN residual block; ``upsample`` doubles the frames (nearest + depthwise transpose)."""

    kernels: Kernels = EAGER_KERNELS

    def __init__(self, dim_in: int, dim_out: int, style_dim: int = 64, upsample: bool = False):
        super().__init__()
        self.upsample_type = "nearest" if upsample else "none"
        self.learned_sc = dim_in != dim_out
        self.conv1 = _conv(dim_in, dim_out, 3, padding=1)
        self.conv2 = _conv(dim_out, dim_out, 3, padding=1)
        self.norm1 = AdaIN1d(style_dim, dim_in)
        self.norm2 = AdaIN1d(style_dim, dim_out)
        if self.learned_sc:
            self.conv1x1 = _conv(dim_in, dim_out, 1, bias=False)
        if upsample:
            self.pool = weight_normed(nn.ConvTranspose1d(dim_in, dim_in, kernel_size=3, stride=2, groups=dim_in,
                                                         padding=1, output_padding=1))

    @property
    def upsamples(self) -> bool:
        return self.upsample_type != "none"

    def forward(self, x: torch.Tensor, s: torch.Tensor, span_in: Span, span_out: Span) -> torch.Tensor:
        """``span_out`` is ``span_in`` unless the block upsamples (then twice the lengths)."""
        m_out = span_out.mask
        k = self.kernels
        if k.compiled:  # the prosody's LSTM outputs come transposed: one compiled layout, not two
            x = x.contiguous()
        r = k.adain_leaky(x, *self.norm1.args(s, span_in), 0.2)
        if self.upsamples:
            r = self.pool(r) * m_out
        r = self.conv1(r)
        r = k.adain_leaky(r, *self.norm2.args(s, span_out), 0.2)
        r = self.conv2(r)
        sc = F.interpolate(x, scale_factor=2, mode="nearest") if self.upsamples else x
        if self.learned_sc:
            sc = self.conv1x1(sc)
        return (r + sc) * _INV_SQRT2 * m_out


class AdaINResBlock1(nn.Module):
    """HiFi-GAN resblock with AdaIN and Snake activations (the ISTFTNet generator's)."""

    kernels: Kernels = EAGER_KERNELS

    def __init__(self, channels: int, kernel_size: int = 3, dilation: tuple[int, ...] = (1, 3, 5),
                 style_dim: int = 64):
        super().__init__()
        self.convs1 = nn.ModuleList(_conv(channels, channels, kernel_size, dilation=d,
                                          padding=(kernel_size * d - d) // 2) for d in dilation)
        self.convs2 = nn.ModuleList(_conv(channels, channels, kernel_size, dilation=1,
                                          padding=(kernel_size - 1) // 2) for _ in dilation)
        self.adain1 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilation)
        self.adain2 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilation)
        self.alpha1 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilation)
        self.alpha2 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilation)

    def forward(self, x: torch.Tensor, s: torch.Tensor, span: Span) -> torch.Tensor:
        z, zb, x = self.parts(x, s, span)
        return (z + zb[:, None]) * span.mask + x

    def parts(self, x: torch.Tensor, s: torch.Tensor, span: Span) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The output as ``(z, zb, x)`` with output ``(z + zb) * mask + x``, so the caller can fuse that into its next
        step.

        Three dilated steps; each step's residual add is fused into the next step's first AdaIN + Snake. The
        convolutions run without their bias, which cuDNN would add in a pass of its own over the activation: a
        ``convs1`` output goes straight into an AdaIN, whose instance norm removes any per-channel constant, so that
        bias changes nothing and is left out; a ``convs2`` bias is added inside the next fused step (``zb``).
        """
        k = self.kernels
        z: torch.Tensor | None = None  # the previous step's conv2 output, not yet added to x
        zb: torch.Tensor | None = None  # ... and its bias
        for c1, c2, n1, n2, a1, a2 in zip(self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1,
                                          self.alpha2, strict=True):
            if z is None:
                xt = k.adain_snake(x, *n1.args(s, span), a1)
            else:
                x, xt = k.residual_adain_snake(z, zb, x, *n1.args(s, span), a1)
            xt = k.adain_snake(_unbiased(c1, xt), *n2.args(s, span), a2)
            z, zb = _unbiased(c2, xt), _bias(c2)
        return z, zb, x  # type: ignore[return-value]


def _unbiased(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` without the bias add."""
    return F.conv1d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)


def _bias(conv: nn.Conv1d) -> torch.Tensor:
    return conv.bias if conv.bias is not None else conv.weight.new_zeros(conv.out_channels)


def packed_lstm(lstm: nn.LSTM, x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Run a batch-first LSTM over (B, T, C) packed by host ``lengths``; returns (B, T, H) zero past each length.

    The reference :func:`masked_lstm` is checked against (it needs host lengths, so no CUDA graph holds it).
    """
    total = x.shape[1]
    if all(n == total for n in lengths):
        out, _ = lstm(x)
        return out
    ordered = all(a >= b for a, b in zip(lengths, lengths[1:], strict=False))
    packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=ordered)
    out, _ = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=total)
    return out


def masked_lstm(lstm: nn.LSTM, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """A one-layer batch-first (Bi)LSTM over clean (B, T, C) with device lengths ``lens`` (B,) int64; returns
    (B, T, H x directions), zero past each length: what :func:`packed_lstm` computes, with no host value.

    The forward direction runs over the padded rows (padding after an item cannot reach its outputs); the
    backward direction runs forward over each item reversed within its own length, and its outputs are
    reversed back. Every step is a device operation, so a CUDA graph can hold it (packing needs host lengths).
    """
    forward, backward = _directions(lstm)
    t = torch.arange(x.shape[1], device=x.device)
    valid = t[None, :] < lens[:, None]  # (B, T)
    out, _ = forward(x)
    if backward is not None:
        rev = torch.where(valid, lens[:, None] - 1 - t[None, :], t[None, :])[:, :, None]  # an involution
        back, _ = backward(torch.gather(x, 1, rev.expand(-1, -1, x.shape[2])))
        out = torch.cat([out, torch.gather(back, 1, rev.expand(-1, -1, back.shape[2]))], dim=-1)
    return out * valid[:, :, None].to(out.dtype)


_DIRECTIONS = "_kokoro_directions"


def _directions(lstm: nn.LSTM) -> tuple[nn.LSTM, nn.LSTM | None]:
    """One-direction copies of ``lstm``'s weights (cuDNN-flattened), rebuilt when its weights, device or
    dtype change (loading a checkpoint bumps the parameters' version). Not registered as submodules: the
    checkpoint layout stays Kokoro's."""
    if lstm.num_layers != 1 or not lstm.batch_first:
        raise ValueError("masked_lstm takes one-layer batch-first LSTMs (Kokoro's)")
    w = lstm.weight_ih_l0
    key = (w.device, w.dtype, w.data_ptr(), *(p._version for p in lstm.parameters()))
    cached = lstm.__dict__.get(_DIRECTIONS)
    if cached is not None and cached[0] == key:
        return cached[1]
    copies: list[nn.LSTM] = []
    with torch.inference_mode(False), torch.no_grad():
        for suffix in ("", "_reverse")[: 2 if lstm.bidirectional else 1]:
            one = nn.LSTM(lstm.input_size, lstm.hidden_size, 1, bias=lstm.bias, batch_first=True)
            one = one.to(w.device, w.dtype).eval().requires_grad_(False)
            for name in ("weight_ih_l0", "weight_hh_l0", *(("bias_ih_l0", "bias_hh_l0") if lstm.bias else ())):
                getattr(one, name).copy_(getattr(lstm, name + suffix))
            one.flatten_parameters()
            copies.append(one)
    pair = (copies[0], copies[1] if len(copies) > 1 else None)
    lstm.__dict__[_DIRECTIONS] = (key, pair)
    return pair


def init_generator_weights(module: nn.Module, std: float = 0.01) -> None:
    """ISTFTNet's init_weights: N(0, 0.01) conv weights."""
    for m in module.modules():
        if isinstance(m, nn.Conv1d | nn.ConvTranspose1d):
            nn.init.normal_(m.weight, 0.0, std)


__all__ = ["AdaIN1d", "AdaLayerNorm", "AdainResBlk1d", "AdaINResBlock1", "LayerNorm", "Span", "WN_FLAG",
           "device_ints", "init_generator_weights", "masked_lstm", "packed_lstm", "weight_normed"]
