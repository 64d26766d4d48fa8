"""smart-turn v3's architecture in torch: a 4-layer Whisper-tiny-sized encoder, attention pooling, a classifier.

The layout and names follow the model pipecat-ai/smart-turn trains (``SmartTurnV3Model``: ``encoder`` is
transformers' ``WhisperEncoder`` with 400 positions, 8 s of 16 kHz audio; ``pool_attention``; ``classifier``),
so a state dict converted from the ONNX export (``agent.smart_turn.onnx_weights``) loads strictly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class SmartTurnShape:
    """The v3 sizes: 80 mel bins x 800 frames in, d_model 384, 6 heads, 4 layers, FFN 1536."""

    n_mels: int = 80
    d_model: int = 384
    heads: int = 6
    layers: int = 4
    ffn: int = 1536
    positions: int = 400


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)))
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class _Layer(nn.Module):
    def __init__(self, s: SmartTurnShape):
        super().__init__()
        self.self_attn = _Attention(s.d_model, s.heads)
        self.self_attn_layer_norm = nn.LayerNorm(s.d_model)
        self.fc1 = nn.Linear(s.d_model, s.ffn)
        self.fc2 = nn.Linear(s.ffn, s.d_model)
        self.final_layer_norm = nn.LayerNorm(s.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class _Encoder(nn.Module):
    def __init__(self, s: SmartTurnShape):
        super().__init__()
        self.conv1 = nn.Conv1d(s.n_mels, s.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(s.d_model, s.d_model, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(s.positions, s.d_model)
        self.layers = nn.ModuleList(_Layer(s) for _ in range(s.layers))
        self.layer_norm = nn.LayerNorm(s.d_model)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).transpose(1, 2)
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class SmartTurnV3(nn.Module):
    """Log-mel features ``[B, 80, 800]`` -> the probability that the turn is complete, ``[B]``."""

    def __init__(self, shape: SmartTurnShape = SmartTurnShape()):
        super().__init__()
        d = shape.d_model
        self.shape = shape
        self.encoder = _Encoder(shape)
        self.pool_attention = nn.Sequential(nn.Linear(d, 256), nn.Tanh(), nn.Linear(256, 1))
        self.classifier = nn.Sequential(nn.Linear(d, 256), nn.LayerNorm(256), nn.GELU(), nn.Dropout(0.1),
                                        nn.Linear(256, 64), nn.GELU(), nn.Linear(64, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(features)
        weights = torch.softmax(self.pool_attention(hidden), dim=1)
        pooled = (hidden * weights).sum(dim=1)
        return torch.sigmoid(self.classifier(pooled)).squeeze(-1)
