"""The x8 ``dw_striding`` subsampling in channels-last form, as pointwise taps and GEMMs (no cuDNN convs).

transformers' module runs Conv2d(1->C, 3x3, s2) and depthwise Conv2d(C, 3x3, s2, groups=C) in NCHW
through cuDNN; on the H200 the grouped (depthwise) kernels alone took 55 of 202 ms of a 128 x 30 s
encoder call. Here the 3x3 stride-2 convolutions are nine strided multiply-adds over a
(batch, time, freq, channel) tensor, which ``torch.compile`` fuses into one memory-bound kernel
each, and the 1x1 convolutions are GEMMs over the channel axis. The final linear's columns are
permuted to the channels-last flattening. Same function as transformers' module (time masks after
every conv, as there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def conv_out(length: torch.Tensor) -> torch.Tensor:
    """Valid length after a kernel-3, stride-2, padding-1 conv."""
    return torch.div(length - 1, 2, rounding_mode="floor") + 1


def _taps(x: torch.Tensor, t_out: int, f_out: int) -> list[torch.Tensor]:
    """The nine stride-2 views of a (B, T+2, F+2, ...) padded tensor, for taps (di, dj) in row-major order."""
    return [
        x[:, di : di + 2 * t_out - 1 : 2, dj : dj + 2 * f_out - 1 : 2] for di in range(3) for dj in range(3)
    ]


class ChannelsLastSubsampling(nn.Module):
    """Features (B, T, F) + frame lengths (B,) -> (B, T/8, D), equal to ``ParakeetEncoderSubsamplingConv2D``."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        convs = [m for m in module.layers if isinstance(m, nn.Conv2d)]
        first, rest = convs[0], convs[1:]
        ok = (
            first.in_channels == 1
            and first.kernel_size == (3, 3)
            and first.stride == (2, 2)
            and first.padding == (1, 1)
            and len(rest) % 2 == 0
        )
        pairs = list(zip(rest[::2], rest[1::2], strict=True))
        for dw, pw in pairs:
            ok = ok and dw.groups == dw.in_channels and dw.kernel_size == (3, 3) and dw.stride == (2, 2)
            ok = ok and pw.kernel_size == (1, 1)
        if not ok:
            raise ValueError("only the dw_striding (3x3, stride 2) subsampling is supported")
        channels = first.out_channels

        def bias(conv: nn.Conv2d) -> torch.Tensor:
            b = conv.bias if conv.bias is not None else torch.zeros(conv.out_channels)
            return b.detach().to(dtype)

        self.w0 = nn.Parameter(
            first.weight.detach()[:, 0].reshape(channels, 9).t().contiguous().to(dtype), False
        )
        self.b0 = nn.Parameter(bias(first), False)
        self.dw_w = nn.ParameterList(
            [
                nn.Parameter(dw.weight.detach()[:, 0].reshape(channels, 9).t().contiguous().to(dtype), False)
                for dw, _ in pairs
            ]
        )
        self.dw_b = nn.ParameterList([nn.Parameter(bias(dw), False) for dw, _ in pairs])
        self.pw_w = nn.ParameterList(
            [nn.Parameter(pw.weight.detach()[:, :, 0, 0].to(dtype), False) for _, pw in pairs]
        )
        self.pw_b = nn.ParameterList([nn.Parameter(bias(pw), False) for _, pw in pairs])
        linear = module.linear
        freq = linear.in_features // channels
        # transformers flattens (C, F); channels-last flattens (F, C): permute the columns once.
        weight = (
            linear.weight.detach()
            .view(linear.out_features, channels, freq)
            .transpose(1, 2)
            .reshape(linear.out_features, -1)
        )
        self.out_w = nn.Parameter(weight.contiguous().to(dtype), False)
        self.out_b = nn.Parameter(linear.bias.detach().to(dtype), False) if linear.bias is not None else None
        self.dtype = dtype

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = feats.to(self.dtype)
        b, t, f = x.shape
        t, f = (t - 1) // 2 + 1, (f - 1) // 2 + 1
        lengths = conv_out(lengths)
        taps = _taps(F.pad(x, (1, 1, 1, 1)), t, f)
        acc = self.b0 + taps[0].unsqueeze(-1) * self.w0[0]
        for k in range(1, 9):
            acc = acc + taps[k].unsqueeze(-1) * self.w0[k]
        x = torch.relu(acc * self._mask(lengths, t))
        for dw_w, dw_b, pw_w, pw_b in zip(self.dw_w, self.dw_b, self.pw_w, self.pw_b, strict=True):
            t, f = (t - 1) // 2 + 1, (f - 1) // 2 + 1
            lengths = conv_out(lengths)
            mask = self._mask(lengths, t)
            taps = _taps(F.pad(x, (0, 0, 1, 1, 1, 1)), t, f)
            acc = dw_b + taps[0] * dw_w[0]
            for k in range(1, 9):
                acc = acc + taps[k] * dw_w[k]
            x = acc * mask
            x = torch.relu(F.linear(x, pw_w, pw_b) * mask)
        return F.linear(x.reshape(b, t, -1), self.out_w, self.out_b)

    def _mask(self, lengths: torch.Tensor, t: int) -> torch.Tensor:
        valid = torch.arange(t, device=lengths.device)[None, :] < lengths[:, None]
        return valid.to(self.dtype)[:, :, None, None]
