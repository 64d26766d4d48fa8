"""Kokoro's text side: the phoneme ``TextEncoder`` and the ``ProsodyPredictor`` (durations, F0, energy).

Parameter names follow ``kokoro.modules``; forwards take padded batches (see ``layers.Span``).
"""

from __future__ import annotations

import torch
from torch import nn

from tts.kokoro.layers import AdainResBlk1d, AdaLayerNorm, LayerNorm, Span, masked_lstm, weight_normed


class TextEncoder(nn.Module):
    """Embedding -> ``depth`` x (conv, layer norm, leaky ReLU) -> BiLSTM; returns (B, C, T)."""

    def __init__(self, channels: int, kernel_size: int, depth: int, n_symbols: int):
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, channels)
        pad = (kernel_size - 1) // 2
        self.cnn = nn.ModuleList(
            nn.Sequential(weight_normed(nn.Conv1d(channels, channels, kernel_size, padding=pad)), LayerNorm(channels),
                          nn.LeakyReLU(0.2), nn.Dropout(0.2))
            for _ in range(depth)
        )
        self.lstm = nn.LSTM(channels, channels // 2, 1, batch_first=True, bidirectional=True)

    def forward(self, ids: torch.Tensor, span: Span) -> torch.Tensor:
        m = span.mask
        x = self.embedding(ids).transpose(1, 2) * m
        for block in self.cnn:
            x = block(x) * m
        x = masked_lstm(self.lstm, x.transpose(1, 2), span.lens)
        return x.transpose(1, 2) * m


class DurationEncoder(nn.Module):
    """Alternating BiLSTM / AdaLayerNorm over (text features ++ style); returns (B, T, d_model + style)."""

    def __init__(self, sty_dim: int, d_model: int, nlayers: int):
        super().__init__()
        self.lstms = nn.ModuleList()
        for _ in range(nlayers):
            self.lstms.append(nn.LSTM(d_model + sty_dim, d_model // 2, num_layers=1, batch_first=True,
                                      bidirectional=True))
            self.lstms.append(AdaLayerNorm(sty_dim, d_model))

    def forward(self, x: torch.Tensor, style: torch.Tensor, span: Span) -> torch.Tensor:
        """``x`` (B, C, T) clean; ``style`` (B, S)."""
        m = span.mask.transpose(1, 2)  # (B, T, 1)
        s = style[:, None, :].expand(-1, x.shape[-1], -1)
        x = torch.cat([x.transpose(1, 2), s], dim=-1) * m
        for block in self.lstms:
            if isinstance(block, AdaLayerNorm):
                x = torch.cat([block(x, style), s], dim=-1) * m
            else:
                x = masked_lstm(block, x, span.lens)
        return x


class ProsodyPredictor(nn.Module):
    def __init__(self, style_dim: int, d_hid: int, nlayers: int, max_dur: int = 50):
        super().__init__()
        self.text_encoder = DurationEncoder(sty_dim=style_dim, d_model=d_hid, nlayers=nlayers)
        self.lstm = nn.LSTM(d_hid + style_dim, d_hid // 2, 1, batch_first=True, bidirectional=True)
        self.duration_proj = _LinearNorm(d_hid, max_dur)
        self.shared = nn.LSTM(d_hid + style_dim, d_hid // 2, 1, batch_first=True, bidirectional=True)
        half = d_hid // 2
        self.F0 = nn.ModuleList([AdainResBlk1d(d_hid, d_hid, style_dim),
                                 AdainResBlk1d(d_hid, half, style_dim, upsample=True),
                                 AdainResBlk1d(half, half, style_dim)])
        self.N = nn.ModuleList([AdainResBlk1d(d_hid, d_hid, style_dim),
                                AdainResBlk1d(d_hid, half, style_dim, upsample=True),
                                AdainResBlk1d(half, half, style_dim)])
        self.F0_proj = nn.Conv1d(half, 1, 1, 1, 0)
        self.N_proj = nn.Conv1d(half, 1, 1, 1, 0)

    def durations(self, d: torch.Tensor, span: Span, speed: torch.Tensor) -> torch.Tensor:
        """Frames per token (B, T) as float (rounding is the caller's); ``d`` from ``text_encoder``."""
        x = masked_lstm(self.lstm, d, span.lens)
        return torch.sigmoid(self.duration_proj(x)).sum(dim=-1) / speed[:, None]

    def f0_energy(self, en: torch.Tensor, s: torch.Tensor, frames: Span, frames2: Span
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """F0 and energy curves (B, 2F) at twice the alignment's frame rate, zero past each item."""
        x = masked_lstm(self.shared, en.transpose(1, 2), frames.lens).transpose(1, 2)
        f0, n = _run(self.F0, x, s, frames, frames2), _run(self.N, x, s, frames, frames2)
        m2 = frames2.mask[:, 0, :]
        return self.F0_proj(f0)[:, 0, :] * m2, self.N_proj(n)[:, 0, :] * m2


def _run(blocks: nn.ModuleList, x: torch.Tensor, s: torch.Tensor, frames: Span, frames2: Span) -> torch.Tensor:
    span = frames
    for block in blocks:
        out = frames2 if block.upsamples else span
        x = block(x, s, span, out)
        span = out
    return x


class _LinearNorm(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim)
        nn.init.xavier_uniform_(self.linear_layer.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_layer(x)


__all__ = ["DurationEncoder", "ProsodyPredictor", "TextEncoder"]
