"""An inference-only FastConformer built from a transformers ``ParakeetEncoder``, shaped for compile + graphs.

Same function as transformers' encoder on valid frames, arranged for speed:
- q/k/v fused into one GEMM; BatchNorm folded into the depthwise conv; the depthwise conv done in
  (batch, time, channel) layout as 9 shifted multiply-adds (one fused kernel under ``torch.compile``);
- the relative-position projection computed once per sequence length (not once per batch element)
  and cached; the Transformer-XL ``rel_shift`` done as a zero-copy strided view;
- the joint's encoder projection (``encoder_projector``) applied inside, so the decoder reads
  ``(batch, frames, 640)`` once;
- one layer function shared by all 24 layers, so ``torch.compile`` compiles one layer per shape.
Padded key frames are masked with an additive ``-inf`` bias; padded rows are garbage-in-garbage-out
like transformers', but every row keeps at least one key so nothing turns NaN.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from asr import compile_cache
from asr.parakeet.encoders.subsampling import ChannelsLastSubsampling


@dataclass
class LayerWeights:
    """One Conformer block's weights, fused and cast for inference."""

    ln: torch.Tensor  # (5, 2, D): ff1, att, conv, ff2, out (weight, bias)
    ff1: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]
    ff2: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    out_w: torch.Tensor
    out_b: torch.Tensor | None
    pos_w: torch.Tensor  # relative_k_proj (D, D)
    bias_u: torch.Tensor  # (H, dh)
    bias_v: torch.Tensor
    pw1_w: torch.Tensor
    pw1_b: torch.Tensor | None
    dw_w: torch.Tensor  # (K, D), BatchNorm folded in
    dw_b: torch.Tensor  # (D,)
    pw2_w: torch.Tensor
    pw2_b: torch.Tensor | None

    def flat(self) -> tuple[torch.Tensor | None, ...]:
        return (
            self.ln,
            *self.ff1,
            *self.ff2,
            self.qkv_w,
            self.qkv_b,
            self.out_w,
            self.out_b,
            self.bias_u,
            self.bias_v,
            self.pw1_w,
            self.pw1_b,
            self.dw_w,
            self.dw_b,
            self.pw2_w,
            self.pw2_b,
        )


def _maybe(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dtype)


def _extract_layer(block: nn.Module, dtype: torch.dtype) -> LayerWeights:
    att, conv = block.self_attn, block.conv
    lns = [
        block.norm_feed_forward1,
        block.norm_self_att,
        block.norm_conv,
        block.norm_feed_forward2,
        block.norm_out,
    ]
    ln = torch.stack([torch.stack([n.weight.detach(), n.bias.detach()]) for n in lns]).to(dtype)

    def ff(m: nn.Module) -> tuple:
        return (
            m.linear1.weight.detach().to(dtype),
            _maybe(m.linear1.bias, dtype),
            m.linear2.weight.detach().to(dtype),
            _maybe(m.linear2.bias, dtype),
        )

    qkv_w = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).detach().to(dtype)
    qkv_b = None
    if att.q_proj.bias is not None:
        qkv_b = torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]).detach().to(dtype)
    bn = conv.norm
    scale = bn.weight.detach().float() / torch.sqrt(bn.running_var.float() + bn.eps)
    dw = conv.depthwise_conv.weight.detach().float()[:, 0, :] * scale[:, None]  # (D, K)
    dw_bias = conv.depthwise_conv.bias.detach().float() if conv.depthwise_conv.bias is not None else 0.0
    dw_b = (dw_bias - bn.running_mean.float()) * scale + bn.bias.detach().float()
    return LayerWeights(
        ln=ln,
        ff1=ff(block.feed_forward1),
        ff2=ff(block.feed_forward2),
        qkv_w=qkv_w,
        qkv_b=qkv_b,
        out_w=att.o_proj.weight.detach().to(dtype),
        out_b=_maybe(att.o_proj.bias, dtype),
        pos_w=att.relative_k_proj.weight.detach().to(dtype),
        bias_u=att.bias_u.detach().to(dtype),
        bias_v=att.bias_v.detach().to(dtype),
        pw1_w=conv.pointwise_conv1.weight.detach()[:, :, 0].to(dtype),
        pw1_b=_maybe(conv.pointwise_conv1.bias, dtype),
        dw_w=dw.t().contiguous().to(dtype),
        dw_b=dw_b.to(dtype),
        pw2_w=conv.pointwise_conv2.weight.detach()[:, :, 0].to(dtype),
        pw2_b=_maybe(conv.pointwise_conv2.bias, dtype),
    )


def conformer_layer(
    x: torch.Tensor,
    pos: torch.Tensor,
    key_bias: torch.Tensor,
    time_valid: torch.Tensor,
    num_heads: int,
    hidden: int,
    ln: torch.Tensor,
    f1_w1: torch.Tensor,
    f1_b1: torch.Tensor | None,
    f1_w2: torch.Tensor,
    f1_b2: torch.Tensor | None,
    f2_w1: torch.Tensor,
    f2_b1: torch.Tensor | None,
    f2_w2: torch.Tensor,
    f2_b2: torch.Tensor | None,
    qkv_w: torch.Tensor,
    qkv_b: torch.Tensor | None,
    out_w: torch.Tensor,
    out_b: torch.Tensor | None,
    bias_u: torch.Tensor,
    bias_v: torch.Tensor,
    pw1_w: torch.Tensor,
    pw1_b: torch.Tensor | None,
    dw_w: torch.Tensor,
    dw_b: torch.Tensor,
    pw2_w: torch.Tensor,
    pw2_b: torch.Tensor | None,
    strided_shift: bool = True,
) -> torch.Tensor:
    """One FastConformer block. x (B,T,D); pos (H, dh, 2T-1); key_bias (B,1,1,T); time_valid (B,T,1).

    ``strided_shift=False`` does the rel_shift with pad/reshape (exportable to ONNX) instead of a
    strided view.
    """
    b, t = x.shape[0], x.shape[1]
    d = hidden  # a Python int, so layer_norm's shape stays static under ONNX tracing
    dh = d // num_heads
    scale = dh**-0.5

    h = F.layer_norm(x, (d,), ln[0, 0], ln[0, 1])
    x = x + 0.5 * F.linear(F.silu(F.linear(h, f1_w1, f1_b1)), f1_w2, f1_b2)

    h = F.layer_norm(x, (d,), ln[1, 0], ln[1, 1])
    q, k, v = F.linear(h, qkv_w, qkv_b).view(b, t, 3, num_heads, dh).unbind(2)
    q_u = (q + bias_u).transpose(1, 2)
    q_v = (q + bias_v).transpose(1, 2)
    bd_full = torch.matmul(q_v, pos)  # (B, H, T, 2T-1); column c is relative position T-1-c
    bias = rel_shift(bd_full, strided_shift) * scale + key_bias
    att = F.scaled_dot_product_attention(
        q_u, k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias, scale=scale
    )
    x = x + F.linear(att.transpose(1, 2).reshape(b, t, d), out_w, out_b)

    h = F.layer_norm(x, (d,), ln[2, 0], ln[2, 1])
    h = F.glu(F.linear(h, pw1_w, pw1_b), dim=-1) * time_valid
    # Materialise h: fused into the 9-tap conv below, inductor recomputed the GLU per tap and read
    # the 2x-wide GEMM output 9 times (0.49 ms per layer at 128 x 30 s on the H200).
    torch._dynamo.graph_break()
    kernel = dw_w.shape[0]
    pad = (kernel - 1) // 2
    hp = F.pad(h, (0, 0, pad, pad))
    conv = dw_b + hp[:, 0:t] * dw_w[0]
    for i in range(1, kernel):
        conv = conv + hp[:, i : i + t] * dw_w[i]
    x = x + F.linear(F.silu(conv), pw2_w, pw2_b)

    h = F.layer_norm(x, (d,), ln[3, 0], ln[3, 1])
    x = x + 0.5 * F.linear(F.silu(F.linear(h, f2_w1, f2_b1)), f2_w2, f2_b2)
    return F.layer_norm(x, (d,), ln[4, 0], ln[4, 1])


def rel_shift(full: torch.Tensor, strided: bool = True) -> torch.Tensor:
    """Transformer-XL shift: ``out[..., i, j] = full[..., i, T-1-i+j]`` for full (B, H, T, 2T-1)."""
    b, h, t, p = full.shape
    if strided:  # zero-copy view of the full matrix, which must own its storage from offset 0
        if not torch.compiler.is_compiling() and (not full.is_contiguous() or full.storage_offset() != 0):
            full = full.clone(memory_format=torch.contiguous_format)
        return full.as_strided((b, h, t, t), (h * t * p, t * p, p - 1, 1), t - 1)
    shifted = F.pad(full, (1, 0)).reshape(b, h, p + 1, t)[:, :, 1:].reshape(b, h, t, p)
    return shifted[..., :t]


def subsampled_lengths(lengths: torch.Tensor, stages: int = 3) -> list[torch.Tensor]:
    """Valid lengths after each stride-2, kernel-3, padding-1 conv: ``(L - 1) // 2 + 1``."""
    out = []
    for _ in range(stages):
        lengths = torch.div(lengths - 1, 2, rounding_mode="floor") + 1
        out.append(lengths)
    return out


def encoder_frames(mel_frames: int, stages: int = 3) -> int:
    for _ in range(stages):
        mel_frames = (mel_frames - 1) // 2 + 1
    return mel_frames


class FastConformer(nn.Module):
    """Feature frames (B, T, mel) + lengths (B,) -> joint-projected encoder frames (B, T/8, joint_dim)."""

    def __init__(
        self, encoder: nn.Module, projector: nn.Linear | None = None, dtype: torch.dtype = torch.bfloat16
    ):
        super().__init__()
        cfg = encoder.config
        self.dtype = dtype
        self.num_heads = cfg.num_attention_heads
        self.hidden = cfg.hidden_size
        self.input_scale = math.sqrt(cfg.hidden_size) if getattr(cfg, "scale_input", False) else 1.0
        try:
            self.subsampling: nn.Module = ChannelsLastSubsampling(encoder.subsampling, dtype)
            self.channels_last = True
        except ValueError:  # another subsampling layout: run transformers' module as is
            self.subsampling = copy.deepcopy(encoder.subsampling).to(dtype).eval()
            self.channels_last = False
        self.inv_freq = encoder.encode_positions.inv_freq.detach().float().clone()
        self.layers = [_extract_layer(block, dtype) for block in encoder.layers]
        self.projector = copy.deepcopy(projector).to(dtype).eval() if projector is not None else None
        self._pos_cache: dict[tuple[int, torch.device], torch.Tensor] = {}
        self.export_mode = False  # ONNX export: positions computed in-graph, rel_shift by reshape
        self.layer_fn: Callable[..., torch.Tensor] = conformer_layer
        self.subsample_fn: Callable[..., torch.Tensor] = self._subsample

    def to_device(self, device: torch.device | str) -> FastConformer:
        """Move every weight (the extracted ones are plain tensors, not parameters)."""
        self.to(device)
        self.inv_freq = self.inv_freq.to(device)
        for layer in self.layers:
            for name, value in vars(layer).items():
                if isinstance(value, torch.Tensor):
                    setattr(layer, name, value.to(device))
                elif isinstance(value, tuple):
                    setattr(layer, name, tuple(v.to(device) if v is not None else None for v in value))
        self._pos_cache.clear()
        return self

    def compile_layers(self, **kwargs) -> FastConformer:
        """``torch.compile`` the shared layer function and the subsampling (one compile per shape)."""
        import torch._dynamo.config as dynamo_config

        # One recompile per shape profile: lift dynamo's per-function limit above any profile count.
        for name in (
            "recompile_limit",
            "cache_size_limit",
            "accumulated_recompile_limit",
            "accumulated_cache_size_limit",
        ):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), 256))
        compile_cache.restore()
        self.layer_fn = torch.compile(conformer_layer, **kwargs)
        self.subsample_fn = torch.compile(self._subsample, **kwargs)
        return self

    def _project_positions(self, x: torch.Tensor) -> list[torch.Tensor]:
        t = x.shape[1]
        rel = torch.arange(t - 1, -t, -1, device=x.device).float()
        freqs = rel[:, None] * self.inv_freq.to(x.device)[None, :]
        pe = torch.stack([freqs.sin(), freqs.cos()], dim=-1).reshape(2 * t - 1, -1).to(self.dtype)
        dh = self.hidden // self.num_heads
        return [
            F.linear(pe, layer.pos_w).reshape(2 * t - 1, self.num_heads, dh).permute(1, 2, 0)
            for layer in self.layers
        ]

    def positions(self, x: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
        """Per-layer projected relative positions (H, dh, 2T-1), cached per length outside export."""
        if self.export_mode:
            return self._project_positions(x)
        key = (x.shape[1], x.device)
        if key not in self._pos_cache:
            self._pos_cache[key] = torch.stack(self._project_positions(x)).contiguous()
        return self._pos_cache[key]

    def _subsample(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            x = self.subsampling(feats, lengths)
        else:
            mask = torch.arange(feats.shape[1], device=feats.device)[None, :] < lengths[:, None]
            x = self.subsampling(feats.to(self.dtype), mask)
        return x * self.input_scale if self.input_scale != 1.0 else x

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor, eager: bool = False) -> torch.Tensor:
        """feats (B, T_mel, n_mels) any float dtype; lengths (B,) int64 mel frames, on the same device.

        ``eager`` skips the compiled functions (a shape no profile was compiled for: no recompile).
        """
        layer_fn = conformer_layer if eager else self.layer_fn
        x = (self._subsample if eager else self.subsample_fn)(feats, lengths)
        b, t, _ = x.shape
        enc_len = subsampled_lengths(lengths)[-1]
        frame = torch.arange(t, device=x.device)
        key_valid = frame[None, :] < torch.clamp(enc_len, min=1)[:, None]
        key_bias = torch.zeros(b, 1, 1, t, device=x.device, dtype=self.dtype).masked_fill(
            ~key_valid[:, None, None, :], float("-inf")
        )
        time_valid = (frame[None, :] < enc_len[:, None]).to(self.dtype)[..., None]
        pos = self.positions(x)
        strided = not self.export_mode
        for i, layer in enumerate(self.layers):
            x = layer_fn(
                x,
                pos[i],
                key_bias,
                time_valid,
                self.num_heads,
                self.hidden,
                *layer.flat(),
                strided_shift=strided,
            )
        return self.projector(x) if self.projector is not None else x
