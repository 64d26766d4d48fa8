"""ALBERT (Kokoro's "PL-BERT" phoneme encoder) with transformers' ``AlbertModel`` parameter names.

Kokoro builds ``transformers.AlbertModel(AlbertConfig(vocab_size=n_token, **plbert))``: one shared
layer applied ``num_hidden_layers`` times, ``gelu_new`` activation, LayerNorm eps 1e-12. Written out
here (about fifty lines) so the engine needs no transformers import; ``tests/tts`` checks it against
transformers' implementation when that is installed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class _Embeddings(nn.Module):
    def __init__(self, vocab: int, emb: int, max_pos: int, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, emb, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_pos, emb)
        self.token_type_embeddings = nn.Embedding(2, emb)
        self.LayerNorm = nn.LayerNorm(emb, eps=eps)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos)[None] + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        b, t, h = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                             attn_mask=keep)
        return self.LayerNorm(x + self.dense(ctx.transpose(1, 2).reshape(b, t, h)))


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inter: int, eps: float):
        super().__init__()
        self.attention = _Attention(hidden, heads, eps)
        self.ffn = nn.Linear(hidden, inter)
        self.ffn_output = nn.Linear(inter, hidden)
        self.full_layer_layer_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        a = self.attention(x, keep)
        return self.full_layer_layer_norm(self.ffn_output(F.gelu(self.ffn(a), approximate="tanh")) + a)


class _Group(nn.Module):
    def __init__(self, hidden: int, heads: int, inter: int, eps: float):
        super().__init__()
        self.albert_layers = nn.ModuleList([_Layer(hidden, heads, inter, eps)])


class _Encoder(nn.Module):
    def __init__(self, emb: int, hidden: int, heads: int, inter: int, eps: float):
        super().__init__()
        self.embedding_hidden_mapping_in = nn.Linear(emb, hidden)
        self.albert_layer_groups = nn.ModuleList([_Group(hidden, heads, inter, eps)])


class Albert(nn.Module):
    """``AlbertModel.last_hidden_state`` for ids (B, T); ``valid`` (B, T) is True on real tokens, None: all."""

    def __init__(self, n_token: int, plbert: dict[str, Any]):
        super().__init__()
        eps = float(plbert.get("layer_norm_eps", 1e-12))
        if plbert.get("hidden_act", "gelu_new") != "gelu_new" or int(plbert.get("num_hidden_groups", 1)) != 1:
            raise ValueError("only ALBERT with one shared gelu_new layer group (Kokoro's) is supported")
        hidden, emb = int(plbert["hidden_size"]), int(plbert.get("embedding_size", 128))
        self.layers = int(plbert["num_hidden_layers"])
        self.embeddings = _Embeddings(n_token, emb, int(plbert["max_position_embeddings"]), eps)
        self.encoder = _Encoder(emb, hidden, int(plbert["num_attention_heads"]), int(plbert["intermediate_size"]),
                                eps)
        self.pooler = nn.Linear(hidden, hidden)  # in the checkpoint; unused by Kokoro
        self.hidden_size = hidden
        self.max_positions = int(plbert["max_position_embeddings"])

    def forward(self, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        x = self.encoder.embedding_hidden_mapping_in(self.embeddings(ids))
        keep = None if valid is None else valid[:, None, None, :]
        layer = self.encoder.albert_layer_groups[0].albert_layers[0]
        for _ in range(self.layers):
            x = layer(x, keep)
        return x
