"""Kokoro's ISTFTNet decoder (``kokoro.istftnet.Decoder``) over padded batches.

Audio is produced at 24 kHz, 600 samples per alignment frame. Besides masking, three places of the
batch-1 original depend on where an item ends, and are reproduced per item here:
the harmonic source's linear interpolation (edge clamping), the source STFT's reflect padding at the
end of the signal, and the inverse STFT's window envelope. The source, both STFTs and the envelope run
in float32 (or float64), whatever the decoder's dtype.

Noise: the source adds Gaussian noise (ISTFTNet's NSF). Per-item ``seeds`` make an item's noise the same
whether it is synthesized alone or in a batch; without seeds one batched draw is used.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tts.kokoro.config import SAMPLE_RATE
from tts.kokoro.fused import EAGER_KERNELS, Kernels
from tts.kokoro.layers import (
    AdainResBlk1d,
    AdaINResBlock1,
    Span,
    init_generator_weights,
    weight_normed,
)

HARMONICS = 9  # SineGen harmonic_num=8 plus the fundamental
SINE_AMP, NOISE_STD, VOICED_THRESHOLD = 0.1, 0.003, 10.0


class SourceModule(nn.Module):
    """``SourceModuleHnNSF``: harmonics of F0 plus noise, merged to one excitation by a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.l_linear = nn.Linear(HARMONICS, 1)

    def forward(self, f0: torch.Tensor, upp: int, noise: torch.Tensor) -> torch.Tensor:
        """``f0`` (B, Fr) at frame rate, ``noise`` (B, Fr*upp) standard normal; returns (B, Fr*upp).

        Kokoro computes the phase at sample rate from a nearest-upsampled F0, downsamples it linearly
        (which reads two equal samples per frame), integrates and upsamples it linearly: the same numbers
        come from integrating at frame rate. Past an item's end F0 is 0, so its phase stays at the last
        frame's value and the upsampling matches the batch-1 edge clamp.
        """
        work = f0.dtype
        h = torch.arange(1, HARMONICS + 1, device=f0.device, dtype=work)
        rad = (f0[:, :, None] * h / SAMPLE_RATE) % 1  # (B, Fr, H)
        phase = torch.cumsum(rad, dim=1) * 2 * math.pi
        phase = F.interpolate(phase.transpose(1, 2) * upp, scale_factor=upp, mode="linear")  # (B, H, T)
        uv = (f0 > VOICED_THRESHOLD).to(work).repeat_interleave(upp, dim=1)  # (B, T)
        w = self.l_linear.weight.to(work)[0]  # (H,)
        harm = torch.einsum("bht,h->bt", torch.sin(phase), w) * SINE_AMP * uv
        # sum_h w_h * noise_h with iid noise_h is one Gaussian with std |w|
        noise_amp = uv * NOISE_STD + (1 - uv) * SINE_AMP / 3
        return torch.tanh(harm + noise_amp * noise * w.norm() + self.l_linear.bias.to(work))


class Generator(nn.Module):
    kernels: Kernels = EAGER_KERNELS  # the fused glue between resblocks (tts.kokoro.fused)

    def __init__(self, style_dim: int, resblock_kernel_sizes: list[int], upsample_rates: list[int],
                 upsample_initial_channel: int, resblock_dilation_sizes: list[list[int]],
                 upsample_kernel_sizes: list[int], gen_istft_n_fft: int, gen_istft_hop_size: int):
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.upsample_rates = list(upsample_rates)
        self.n_fft, self.hop = gen_istft_n_fft, gen_istft_hop_size
        self.m_source = SourceModule()
        self.noise_convs = nn.ModuleList()
        self.noise_res = nn.ModuleList()
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes, strict=True)):
            self.ups.append(weight_normed(nn.ConvTranspose1d(upsample_initial_channel // (2**i),
                                                             upsample_initial_channel // (2 ** (i + 1)),
                                                             k, u, padding=(k - u) // 2)))
        self.resblocks = nn.ModuleList()
        ch = upsample_initial_channel
        for i in range(len(self.ups)):
            ch = upsample_initial_channel // (2 ** (i + 1))
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes, strict=True):
                self.resblocks.append(AdaINResBlock1(ch, k, tuple(d), style_dim))
            if i + 1 < len(upsample_rates):
                stride = math.prod(upsample_rates[i + 1:])
                self.noise_convs.append(nn.Conv1d(self.n_fft + 2, ch, kernel_size=stride * 2, stride=stride,
                                                  padding=(stride + 1) // 2))
                self.noise_res.append(AdaINResBlock1(ch, 7, (1, 3, 5), style_dim))
            else:
                self.noise_convs.append(nn.Conv1d(self.n_fft + 2, ch, kernel_size=1))
                self.noise_res.append(AdaINResBlock1(ch, 11, (1, 3, 5), style_dim))
        self.conv_post = weight_normed(nn.Conv1d(ch, self.n_fft + 2, 7, 1, padding=3))
        init_generator_weights(self.ups)
        init_generator_weights(self.conv_post)

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per input frame of the generator (the decoder's doubled frames)."""
        return math.prod(self.upsample_rates) * self.hop

    def forward(self, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor, span: Span, noise: torch.Tensor,
                work: torch.dtype) -> tuple[torch.Tensor, list[int] | None]:
        """``x`` (B, C, F2) clean, ``f0`` (B, F2); returns padded audio (B, T) in ``work`` dtype and lengths
        (host ints; None when ``span`` has device lengths only). Every length below is a device tensor
        computed from ``span.lens``, so the pass has no host value in it (a CUDA graph captures it)."""
        dtype, upp = x.dtype, self.samples_per_frame
        source = self.m_source(f0.to(work), upp, noise)
        lens = span.lens * upp
        har = _stft(source, lens, self.n_fft, self.hop)  # (B, n_fft + 2, frames), zero past each item
        spec_frames = lens // self.hop + 1
        har = har.to(dtype)
        spans = []
        frames = span.lens
        for i, u in enumerate(self.upsample_rates):
            frames = frames * u
            last = i == self.num_upsamples - 1
            spans.append(Span.of_lens(frames + 1 if last else frames,
                                      x.shape[-1] * math.prod(self.upsample_rates[: i + 1]) + (1 if last else 0),
                                      dtype))
        k = self.kernels
        x = F.leaky_relu(x, 0.1)
        for i in range(self.num_upsamples):
            sp = spans[i]
            last = i == self.num_upsamples - 1
            z_source, zb_source, x_source = self.noise_res[i].parts(self.noise_convs[i](har) * sp.mask, s, sp)
            x = self.ups[i](x)
            if last:
                x = F.pad(x, (1, 0), mode="reflect")
            x = k.add_source(x, z_source, zb_source, x_source, sp.mask)
            parts: list[torch.Tensor] = []
            for j in range(self.num_kernels):
                parts.extend(self.resblocks[i * self.num_kernels + j].parts(x, s, sp))
            # the resblocks' average (their (z, bias, x) triples), then the next stage's leaky_relu(0.1) (conv_post's
            # default 0.01 + mask)
            x = k.mean_leaky(sp.mask, 0.01 if last else 0.1, *parts)
        x = self.conv_post(x).to(work)
        half = self.n_fft // 2 + 1
        spec, phase = torch.exp(x[:, :half]), torch.sin(x[:, half:])
        lengths = None if span.lengths is None else [n * upp for n in span.lengths]
        return _istft(spec, phase, spec_frames, self.n_fft, self.hop), lengths


def _window(n_fft: int, like: torch.Tensor) -> torch.Tensor:
    return torch.hann_window(n_fft, periodic=True, dtype=like.dtype, device=like.device)


def _stft(x: torch.Tensor, lengths: torch.Tensor, n_fft: int, hop: int) -> torch.Tensor:
    """``torch.stft(center=True, reflect)`` magnitude ++ phase of each item's own length (``lengths`` (B,)
    int64 on the device), zero-padded."""
    b, t = x.shape
    pad = n_fft // 2
    lens = lengths[:, None]
    pos = torch.arange(t + pad, device=x.device)[None, :]
    # each item's end reflects its own last samples: index 2(L-1) - p for p >= L
    src = torch.where(pos < lens, pos, 2 * (lens - 1) - pos).clamp(min=0)
    right = torch.gather(F.pad(x, (0, pad)), 1, src)
    left = x[:, 1:pad + 1].flip(-1)
    frames = torch.cat([left, right], dim=1).unfold(1, n_fft, hop)  # (B, N, n_fft)
    spec = torch.fft.rfft(frames * _window(n_fft, x), dim=-1)  # (B, N, bins)
    count = (lengths // hop + 1)[:, None, None]
    valid = (torch.arange(frames.shape[1], device=x.device)[None, :, None] < count).to(x.dtype)
    out = torch.cat([spec.abs(), torch.angle(spec)], dim=-1) * valid
    return out.transpose(1, 2)


def _istft(spec: torch.Tensor, phase: torch.Tensor, frames: torch.Tensor, n_fft: int, hop: int) -> torch.Tensor:
    """``torch.istft(center=True)`` of each item's first ``frames[i]`` frames (``frames`` (B,) int64 on the
    device); (B, hop * (N - 1)), zero past."""
    b, _, n = spec.shape
    dev = spec.device
    win = _window(n_fft, spec)
    valid = (torch.arange(n, device=dev)[None, :] < frames[:, None]).to(spec.dtype)
    z = torch.polar(spec, phase).transpose(1, 2)  # (B, N, bins)
    chunks = torch.fft.irfft(z, n=n_fft, dim=-1) * win * valid[:, :, None]  # (B, N, n_fft)
    total = n_fft + hop * (n - 1)
    ola = F.fold(chunks.transpose(1, 2), output_size=(1, total), kernel_size=(1, n_fft), stride=(1, hop))
    env = F.conv_transpose1d(valid[:, None, :], (win * win)[None, None, :], stride=hop)
    pad = n_fft // 2
    out = ola[:, 0, 0, pad:total - pad] / env[:, 0, pad:total - pad].clamp(min=1e-11)
    length = (hop * (frames - 1))[:, None]
    return out * (torch.arange(out.shape[1], device=dev)[None, :] < length).to(out.dtype)


class Decoder(nn.Module):
    """Kokoro's decoder; ``decoder_dim`` / ``asr_res_dim`` are 1024 / 64 in Kokoro-82M."""

    def __init__(self, dim_in: int, style_dim: int, istftnet: dict[str, Any], decoder_dim: int = 1024,
                 asr_res_dim: int = 64):
        super().__init__()
        mid, extra = decoder_dim, 2 + asr_res_dim
        out = int(istftnet["upsample_initial_channel"])
        self.encode = AdainResBlk1d(dim_in + 2, mid, style_dim)
        self.decode = nn.ModuleList([AdainResBlk1d(mid + extra, mid, style_dim),
                                     AdainResBlk1d(mid + extra, mid, style_dim),
                                     AdainResBlk1d(mid + extra, mid, style_dim),
                                     AdainResBlk1d(mid + extra, out, style_dim, upsample=True)])
        self.F0_conv = weight_normed(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
        self.N_conv = weight_normed(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
        self.asr_res = nn.Sequential(weight_normed(nn.Conv1d(dim_in, asr_res_dim, kernel_size=1)))
        self.generator = Generator(style_dim, **istftnet)

    def forward(self, asr: torch.Tensor, f0_curve: torch.Tensor, n_curve: torch.Tensor, s: torch.Tensor,
                frames: Span, frames2: Span, noise: torch.Tensor, work: torch.dtype
                ) -> tuple[torch.Tensor, list[int] | None]:
        """``asr`` (B, C, F); curves (B, 2F); ``s`` the 128-d decoder style. Returns (audio (B, T), lengths)."""
        m = frames.mask
        f0 = self.F0_conv(f0_curve[:, None]) * m
        n = self.N_conv(n_curve[:, None]) * m
        x = self.encode(torch.cat([asr, f0, n], dim=1), s, frames, frames)
        asr_res = self.asr_res(asr) * m
        span = frames
        for block in self.decode:
            if not block.upsamples:
                x = block(torch.cat([x, asr_res, f0, n], dim=1), s, span, span)
            else:
                x = block(torch.cat([x, asr_res, f0, n], dim=1), s, span, frames2)
                span = frames2
        return self.generator(x, s, f0_curve, span, noise, work)
