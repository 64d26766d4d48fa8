"""Tiny random-weight Parakeet-TDT checkpoints of the real architecture, for tests and demos.

``make_tiny_checkpoint`` writes a transformers-format folder (``config.json``,
``model.safetensors``, ``generation_config.json``, ``preprocessor_config.json``, a real
SentencePiece ``tokenizer.model`` trained offline here, plus ``tokenizer.json``);
``make_tiny_nemo`` writes the same weights as a ``.nemo`` archive with NeMo's key names.
``tiny_model`` / ``checkpoint`` give the same model in memory (no tokenizer training) and
``tiny_tdt`` the GPU parity tests' model: the one builder for tests and benches.

The joint's output bias is set so decoding behaves like speech: blank wins most frames and the
model emits about ``target_rate`` tokens per encoder frame (calibrated on synthetic audio unless
``blank_bias`` is given). Duration logits get a spread of biases so jumps of 0..4 all occur.
"""

from __future__ import annotations

import io
import json
import math
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asr.parakeet._deps import require

_WORD_TEXT = (
    "the a an and or but if then so because when while where what who how why this that these those "
    "i you he she we they it me him her us them my your our their hello hi yes no okay thanks please "
    "sorry good great fine bad right left up down in out on off over under again now later today "
    "tomorrow yesterday morning evening night time day week month year call phone number order "
    "account payment card bank money price cost help question answer service agent support ticket "
    "weather rain sun cloud wind cold warm hot city street house home office room door window table "
    "chair book page letter word name voice sound music song radio news story water coffee tea bread "
    "apple orange green blue red black white yellow one two three four five six seven eight nine ten "
    "hundred thousand first second third last next open close start stop wait go come see look listen "
    "speak talk say tell ask want need like love know think make take give find keep turn move run "
    "walk drive fly read write send receive check change cancel book meeting train flight ticket hotel"
)
_SYLLABLES = "ka ri mo ten sa lu vin dor pel quo zan tri fe gol hum bra cle dru esk fon gri"
# Inference-only encoder: every dropout off (the bench's v3-sized config uses it too).
NO_DROPOUT = dict(dropout=0.0, dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0, attention_dropout=0.0)


def synthetic_corpus(seed: int = 0, sentences: int = 4000) -> list[str]:
    """Deterministic English-like sentences (real words plus made-up ones) to train a tokenizer on."""
    rng = random.Random(seed)
    syl = _SYLLABLES.split()
    made_up = ["".join(rng.choice(syl) for _ in range(rng.randint(2, 4))) for _ in range(400)]
    vocab = _WORD_TEXT.split() * 3 + made_up
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 14))) for _ in range(sentences)]


def train_sentencepiece(vocab_size: int, seed: int = 0) -> bytes:
    """Train a BPE SentencePiece model (``<unk>`` = 0, ``<pad>`` = 1) and return the model bytes."""
    spm = require("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(synthetic_corpus(seed)), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", character_coverage=1.0, unk_id=0, pad_id=1, bos_id=-1, eos_id=-1,
        num_threads=1, minloglevel=2, split_digits=False,
    )
    return model.getvalue()


def tiny_config(vocab_size: int, layers: int, hidden: int, pred_hidden: int) -> object:
    """A ``ParakeetTDTConfig`` of the real architecture at toy width (128 mels, x8 subsampling)."""
    from transformers import ParakeetTDTConfig

    encoder = dict(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=hidden * 4,
        num_mel_bins=128, subsampling_conv_channels=16, conv_kernel_size=9, attention_bias=False,
        convolution_bias=False, scale_input=False, **NO_DROPOUT,
    )
    return ParakeetTDTConfig(
        encoder_config=encoder, vocab_size=vocab_size + 1, blank_token_id=vocab_size, pad_token_id=1,
        decoder_hidden_size=pred_hidden, num_decoder_layers=2, durations=[0, 1, 2, 3, 4], max_symbols_per_step=10,
    )


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights at scales that make the joint's decisions depend on the audio and the history."""
    gen = torch.Generator().manual_seed(seed)

    def normal_(t: torch.Tensor, std: float, mean: float = 0.0) -> None:
        t.copy_(torch.randn(t.shape, generator=gen) * std + mean)

    with torch.no_grad():
        for module in model.encoder.modules():  # fan-in scaled, so activations keep unit size
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)):
                fan_in = module.weight[0].numel()
                normal_(module.weight, 1.0 / math.sqrt(fan_in))
                if module.bias is not None:
                    normal_(module.bias, 0.05)
        for layer in model.encoder.layers:
            bn = layer.conv.norm
            normal_(bn.running_mean, 0.3)
            bn.running_var.copy_(torch.rand(bn.running_var.shape, generator=gen) * 1.5 + 0.5)
            normal_(bn.weight, 0.2, 1.0)
            normal_(bn.bias, 0.2)
            normal_(layer.self_attn.bias_u, 0.3)
            normal_(layer.self_attn.bias_v, 0.3)
        hidden = model.config.encoder_config.hidden_size
        pred = model.config.decoder_hidden_size
        normal_(model.encoder_projector.weight, 1.0 / math.sqrt(hidden))
        normal_(model.encoder_projector.bias, 0.1)
        normal_(model.decoder.embedding.weight, 1.0)
        model.decoder.embedding.weight[model.config.blank_token_id].zero_()  # NeMo: blank is padding_idx
        normal_(model.decoder.decoder_projector.weight, 1.0 / math.sqrt(pred))
        normal_(model.decoder.decoder_projector.bias, 0.1)
        normal_(model.joint.head.weight, 2.0 / math.sqrt(pred))
        # relu(hidden) >= 0: zero-sum rows keep one logit from winning on its row sum alone
        head = model.joint.head.weight
        head.sub_(head.mean(dim=1, keepdim=True))
        head[model.config.vocab_size :].mul_(2.0)  # durations: let the audio, not the prior, decide
        model.joint.head.bias.zero_()


def set_joint_bias(head: torch.nn.Linear, vocab_size: int, blank_bias: float) -> None:
    """Token biases 0, blank ``blank_bias``; duration biases favour 1-2 frames, allow 0-4."""
    with torch.no_grad():
        head.bias.zero_()
        head.bias[vocab_size] = blank_bias
        head.bias[vocab_size + 1 :] = torch.tensor([-0.6, 1.0, 0.8, 0.4, 0.0], dtype=head.bias.dtype)


def synthetic_speech(seconds: float, seed: int, sample_rate: int = 16000) -> np.ndarray:
    """A deterministic speech-like signal: pitched, formant-ish bursts with pauses and noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate)
    t = np.arange(n) / sample_rate
    out = 0.003 * rng.standard_normal(n)
    pos = 0
    while pos < n:
        dur = int(rng.uniform(0.08, 0.35) * sample_rate)
        seg = slice(pos, min(n, pos + dur))
        if rng.random() < 0.75:
            f0 = rng.uniform(90, 240)
            env = np.hanning(seg.stop - seg.start)
            tone = sum(np.sin(2 * np.pi * f0 * k * t[seg]) / k for k in range(1, 6))
            formant = np.sin(2 * np.pi * rng.uniform(300, 3000) * t[seg])
            out[seg] += 0.1 * env * (tone + 0.5 * formant)
        else:
            out[seg] += 0.02 * rng.standard_normal(seg.stop - seg.start)
        pos += dur + int(rng.uniform(0.0, 0.15) * sample_rate)
    return out.astype(np.float32)


def encode_clips(model: torch.nn.Module, clips: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Projected encoder output and lengths for a list of 16 kHz clips (reference path)."""
    from asr.parakeet.features import LogMelFeatures

    features = LogMelFeatures()
    lengths = torch.tensor([len(c) for c in clips])
    audio = torch.zeros(len(clips), int(lengths.max()))
    for i, clip in enumerate(clips):
        audio[i, : len(clip)] = torch.from_numpy(clip)
    feats, frames = features(audio, lengths)
    mask = torch.arange(feats.shape[1]).unsqueeze(0) < frames.unsqueeze(1)
    with torch.inference_mode():
        out = model.get_audio_features(input_features=feats, attention_mask=mask)
    return out.pooler_output, out.attention_mask.sum(-1)


def center_encoder_projection(model: torch.nn.Module, seed: int = 0) -> None:
    """Shift the joint's encoder projection bias so its output averages 0 over speech-like audio."""
    clips = [synthetic_speech(4.0, seed=seed * 100 + 50 + i) for i in range(2)]
    enc, lengths = encode_clips(model, clips)
    mask = torch.arange(enc.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    mean = enc[mask].mean(dim=0)
    with torch.no_grad():
        model.encoder_projector.bias.sub_(mean)


def calibrate_blank_bias(model: torch.nn.Module, target_rate: float = 0.3, seed: int = 0) -> float:
    """Bisect the blank bias until greedy decoding emits about ``target_rate`` tokens per frame."""
    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder

    clips = [synthetic_speech(3.0 + i, seed=seed * 100 + i) for i in range(5)]
    enc, lengths = encode_clips(model, clips)
    decoder = LabelLoopingDecoder.from_model(model)
    state = decoder.alloc(enc.shape[0], enc.shape[1])

    def rate(bias: float) -> float:
        set_joint_bias(decoder.joint_head, model.config.blank_token_id, bias)
        seqs, _ = decoder.decode(enc, lengths, state=state)
        return sum(len(s.tokens) for s in seqs) / float(lengths.sum())

    low, high = -5.0, 30.0
    for _ in range(10):
        mid = (low + high) / 2
        if rate(mid) > target_rate:
            low = mid
        else:
            high = mid
    return round((low + high) / 2, 3)


def tiny_model(seed: int = 0, layers: int = 2, hidden: int = 64, vocab_size: int = 256,
               blank_bias: float | None = None, target_rate: float = 0.3,
               pred_hidden: int | None = None) -> torch.nn.Module:
    """The tiny architecture and weight recipe (eval, float32, CPU), without a tokenizer.

    About ``target_rate`` tokens per encoder frame on speech-like audio (unless ``blank_bias``).
    """
    from transformers import ParakeetForTDT

    torch.manual_seed(seed)
    config = tiny_config(vocab_size, layers, hidden, pred_hidden or hidden)
    model = ParakeetForTDT(config).eval().requires_grad_(False)
    _randomize(model, seed)
    center_encoder_projection(model, seed)
    if blank_bias is None:
        blank_bias = calibrate_blank_bias(model, target_rate, seed)
    set_joint_bias(model.joint.head, vocab_size, blank_bias)
    return model


def build_tiny_model(
    vocab_size: int = 256, layers: int = 2, seed: int = 0, blank_bias: float | None = None,
    hidden: int = 64, pred_hidden: int = 64, target_rate: float = 0.3,
) -> tuple[torch.nn.Module, bytes]:
    """The model (eval, float32) and its SentencePiece model bytes."""
    sp_model = train_sentencepiece(vocab_size, seed)
    model = tiny_model(seed, layers, hidden, vocab_size, blank_bias, target_rate, pred_hidden)
    gen = model.generation_config
    gen.decoder_start_token_id = model.config.blank_token_id
    gen.pad_token_id = model.config.pad_token_id
    # as transformers' converter does: never pick a duration logit as the next token
    gen.suppress_tokens = list(range(vocab_size + 1, vocab_size + 1 + len(model.config.durations)))
    return model, sp_model


class IdTokenizer:
    """Token ids as text (``t17 t4``): the engine's tokenizer contract without a model file."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(f"t{i}" for i in ids if 0 <= i < self.vocab_size)

    def piece(self, token_id: int) -> str:
        return f"\u2581t{token_id}" if 0 <= token_id < self.vocab_size else ""


def checkpoint(model: torch.nn.Module, source: str = "random") -> Any:
    """Wrap a transformers ``ParakeetForTDT`` as a ``ParakeetCheckpoint`` (default features, ``IdTokenizer``)."""
    from asr.parakeet.features import FeatureConfig
    from asr.parakeet.loading import ParakeetCheckpoint

    config = model.config
    features = FeatureConfig(n_mels=config.encoder_config.num_mel_bins)
    return ParakeetCheckpoint(model, IdTokenizer(config.vocab_size - 1), features, source)


# The GPU path's CPU tests: 2 layers, 64 wide, 32 mels, 32 tokens + blank.
TINY_TDT_ENCODER = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_mel_bins=32,
    subsampling_conv_channels=8, attention_bias=False, convolution_bias=False, scale_input=False, **NO_DROPOUT,
)


def tiny_tdt(seed: int = 0, **enc_overrides: Any) -> torch.nn.Module:
    """A 2-layer, 64-wide ``ParakeetForTDT`` (transformers' init) with non-trivial BatchNorm statistics
    and attention biases: the model the GPU path's parity tests compare implementations on."""
    import transformers

    config = transformers.ParakeetTDTConfig(
        encoder_config={**TINY_TDT_ENCODER, **enc_overrides}, vocab_size=33, decoder_hidden_size=16,
        blank_token_id=32)
    torch.manual_seed(seed)
    model = transformers.ParakeetForTDT(config).eval()
    with torch.no_grad():
        for layer in model.encoder.layers:
            bn = layer.conv.norm
            bn.running_mean.normal_(0, 0.3)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_(1.0, 0.2)
            bn.bias.normal_(0, 0.2)
            layer.self_attn.bias_u.normal_(0, 0.3)
            layer.self_attn.bias_v.normal_(0, 0.3)
    return model


def _write_tokenizer_json(sp_file: Path, out_dir: Path) -> None:
    """``tokenizer.json`` as transformers' converter writes it (what Hub checkpoints carry)."""
    try:
        from transformers.convert_slow_tokenizer import ParakeetConverter

        ParakeetConverter(str(sp_file)).converted().save(str(out_dir / "tokenizer.json"))
    except Exception:  # protobuf missing or mismatched: tokenizer.model is enough for Cadence
        return


def make_tiny_checkpoint(
    out_dir: str | Path, vocab_size: int = 256, layers: int = 2, seed: int = 0,
    blank_bias: float | None = None, hidden: int = 64, pred_hidden: int = 64,
) -> Path:
    """Write a tiny transformers-format ``ParakeetForTDT`` folder; return its path."""
    from asr.parakeet.features import FeatureConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, sp_model = build_tiny_model(vocab_size, layers, seed, blank_bias, hidden, pred_hidden)
    model.save_pretrained(out)
    (out / "tokenizer.model").write_bytes(sp_model)
    _write_tokenizer_json(out / "tokenizer.model", out)
    FeatureConfig().save_hf(out)
    blank = float(model.joint.head.bias[vocab_size].detach())
    (out / "cadence_tiny.json").write_text(json.dumps({"seed": seed, "blank_bias": blank, "layers": layers}))
    return out


def make_tiny_nemo(
    out_path: str | Path, vocab_size: int = 256, layers: int = 2, seed: int = 0,
    blank_bias: float | None = None, hidden: int = 64, pred_hidden: int = 64, hf_dir: str | Path | None = None,
) -> Path:
    """Write a tiny ``.nemo`` archive; with ``hf_dir`` (a tiny folder), the same weights as that folder."""
    from transformers import ParakeetForTDT

    from asr.parakeet.features import FeatureConfig, slaney_mel_filterbank
    from asr.parakeet.nemo_format import hf_to_nemo_config, hf_to_nemo_state_dict, write_nemo
    from asr.parakeet.tokenizer import SentencePieceTokenizer

    tmp = None
    if hf_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="cadence-tiny-"))
        hf_dir = make_tiny_checkpoint(tmp, vocab_size, layers, seed, blank_bias, hidden, pred_hidden)
    try:
        hf_dir = Path(hf_dir)
        model = ParakeetForTDT.from_pretrained(hf_dir).eval()
        sp_bytes = (hf_dir / "tokenizer.model").read_bytes()
        tok = SentencePieceTokenizer(hf_dir / "tokenizer.model")
        labels = [tok.piece(i) for i in range(tok.vocab_size)]
        feature = FeatureConfig()
        name = "1a2b3c4d_tokenizer.model"
        config = hf_to_nemo_config(model.config, feature.as_dict(), labels, name)
        state = hf_to_nemo_state_dict({k: v.clone() for k, v in model.state_dict().items()})
        state["preprocessor.featurizer.window"] = torch.hann_window(feature.win_length, periodic=False)
        state["preprocessor.featurizer.fb"] = torch.from_numpy(slaney_mel_filterbank(feature)).unsqueeze(0)
        return write_nemo(out_path, config, state, sp_bytes, name)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# A reference model with decision margins like a trained model's (for numerics checks)

FRAME_SAMPLES = 1280  # one encoder frame: 8 feature hops of 10 ms at 16 kHz


def block_speech(seconds: float, seed: int, sample_rate: int = 16000) -> tuple[np.ndarray, np.ndarray]:
    """Speech-like audio in 80 ms blocks, one encoder frame each: runs of 3-8 voiced blocks (a
    pitched tone with harmonics and a formant, 5 ms ramps) between runs of 2-5 near-silent ones.
    Returns the audio and the per-block voiced mask (what ``sharpen_decisions`` calibrates on)."""
    rng = np.random.default_rng(seed)
    blocks = int(seconds * sample_rate) // FRAME_SAMPLES
    voiced = np.zeros(blocks, dtype=bool)
    out = 0.003 * rng.standard_normal(blocks * FRAME_SAMPLES)
    pos = int(rng.integers(1, 4))
    while pos < blocks:
        run = min(int(rng.integers(3, 9)), blocks - pos)
        voiced[pos : pos + run] = True
        n = run * FRAME_SAMPLES
        t = np.arange(n) / sample_rate
        f0, formant = rng.uniform(90, 240), rng.uniform(300, 3000)
        tone = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6)) + 0.5 * np.sin(2 * np.pi * formant * t)
        ramp = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.005 * sample_rate))
        out[pos * FRAME_SAMPLES : pos * FRAME_SAMPLES + n] += 0.1 * ramp * tone
        pos += run + int(rng.integers(2, 6))
    return out.astype(np.float32), voiced


def _clean_frames(voiced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Voiced and silent blocks whose neighbours are of the same kind (no boundary smear)."""
    same = np.ones_like(voiced)
    same[1:] &= voiced[1:] == voiced[:-1]
    same[:-1] &= voiced[:-1] == voiced[1:]
    return voiced & same, ~voiced & same


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


DURATION_SHARES = (0.15, 0.35, 0.25, 0.15, 0.10)  # how often each jump follows a label (durations 0..4)


@torch.no_grad()
def sharpen_decisions(model: torch.nn.Module, seed: int = 0, target_margin: float = 6.0,
                      calibration_s: float = 8.0, clips: int = 8, attention_scale: float = 0.3,
                      branch_scale: float = 0.3) -> dict[str, float]:
    """Rewire a ``ParakeetForTDT``'s predictor and joint (in place, any size) so that greedy decisions
    have margins like a trained model's: several logits, far above bf16 rounding.

    A random model's top-1 and top-2 logits are order statistics of a random projection: their gap
    is a few percent of the logits' spread, so bf16 rounding flips decisions in most utterances,
    and scaling the joint scales gap and rounding alike. Here each decision rests on a quantity
    that rounding barely moves:

    * which token: both LSTM layers run saturated (input and output gates open, forget gate
      shut, large cell inputs), so the predictor's output after a label is nearly a sign pattern
      of (label, a little history); each pattern aligns with exactly one token row, the next
      token of a fixed walk through the vocabulary;
    * how far to jump: a few predictor units carry a sign code of the jump that follows each
      label (history-free), read by the duration rows;
    * blank or token: the encoder, projected onto the direction that separates voiced from silent
      frames of :func:`block_speech` (calibrated on ``clips`` such clips): blank on silence, a
      token on voice (self-attention's output is scaled by ``attention_scale``, the other branches'
      by ``branch_scale``, so that frames keep their own voicing). This one stays continuous (a random encoder separates the two only
      roughly), so it is where the remaining near ties are.

    Everything still runs through the real architecture (features, encoder, LSTM recurrence,
    joint, TDT durations), so a numerics bug anywhere changes tokens or frames. Returns the scales.
    """
    gen = torch.Generator().manual_seed(seed + 7919)
    dev = next(model.parameters()).device
    config = model.config
    blank, labels = config.blank_token_id, config.vocab_size  # labels: tokens + blank
    n_dur = len(config.durations)
    dec, lstm, head = model.decoder, model.decoder.lstm, model.joint.head
    P, H, E = lstm.hidden_size, head.in_features, dec.embedding.weight.shape[1]
    group = 2  # LSTM units per duration class
    if n_dur * group > P or 2 + n_dur >= H or n_dur > E:
        raise ValueError("the predictor is too narrow for the duration code")

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dev, head.weight.dtype)

    # 0. which jump follows each label, as a +-3 code in the first n_dur embedding dimensions
    shares = torch.tensor(DURATION_SHARES[:n_dur] if n_dur <= len(DURATION_SHARES) else [1.0] * n_dur)
    follow = torch.multinomial(shares / shares.sum(), labels, replacement=True, generator=gen).to(dev)
    emb = randn(labels, E)
    emb[:, :n_dur] = -3.0
    emb[torch.arange(labels, device=dev), follow] = 3.0
    emb[blank] = 0.0  # NeMo: blank is the padding index (the start symbol)
    dec.embedding.weight.copy_(emb)

    # 1. a saturated LSTM; units [0, n_dur * group) carry the jump code without history
    code = torch.arange(n_dur * group, device=dev)
    for layer in range(lstm.num_layers):
        fan_in = getattr(lstm, f"weight_ih_l{layer}").shape[1]
        gain = 4.0 if layer == 0 else 6.0  # layer 0 reads N(0, 1) embeddings, later ones +-0.76 patterns
        w_ih = randn(4 * P, fan_in) * 0.2 / math.sqrt(fan_in)
        w_ih[2 * P : 3 * P] *= gain / 0.2
        w_hh = randn(4 * P, P) * 0.3 / math.sqrt(P)  # history: a nudge on the cell input
        bias = torch.cat([torch.full((P,), 6.0, device=dev), torch.full((P,), -6.0, device=dev), randn(P).float() * 0.3,
                          torch.full((P,), 6.0, device=dev)])
        rows = 2 * P + code
        w_ih[rows] = 0.0
        w_hh[rows] = 0.0
        bias[rows] = 0.0  # zero input (the start symbol): exactly zero output, no jump preferred
        source = code // group if layer == 0 else code  # the code dimension, or the layer below's unit
        w_ih[rows, source] = 3.0 if layer == 0 else 0.0
        if layer > 0:
            for j in range(n_dur):
                w_ih[2 * P + code[j * group : (j + 1) * group], j * group : (j + 1) * group] = 4.0
        getattr(lstm, f"weight_ih_l{layer}").copy_(w_ih)
        getattr(lstm, f"weight_hh_l{layer}").copy_(w_hh)
        getattr(lstm, f"bias_ih_l{layer}").copy_(bias)
        getattr(lstm, f"bias_hh_l{layer}").zero_()

    # joint hidden units: [0, 2) voicing (from the encoder), [2, 2 + n_dur) the jump code, the rest tokens
    acoustic, jump = [0, 1], list(range(2, 2 + n_dur))
    rest = slice(2 + n_dur, H)
    wp = randn(H, P) / math.sqrt(P)
    wp[: 2 + n_dur] = 0.0
    for j in range(n_dur):
        wp[jump[j], j * group : (j + 1) * group] = 1.0
    dec.decoder_projector.weight.copy_(wp)
    dec.decoder_projector.bias.zero_()

    # 2. a more local encoder: random attention mixes every frame into every other and random 9-tap
    #    convolutions smear each frame over its neighbours (a trained encoder keeps frames apart),
    #    which buries each frame's own voicing; the blocks' branches are scaled down (residuals kept)
    for layer in model.encoder.layers:
        for out, scale in ((layer.self_attn.o_proj, attention_scale), (layer.conv.pointwise_conv2, branch_scale),
                           (layer.feed_forward1.linear2, branch_scale), (layer.feed_forward2.linear2, branch_scale)):
            out.weight.mul_(scale)
            if out.bias is not None:
                out.bias.mul_(scale)

    # 3. the encoder's voicing direction, from clean voiced / silent frames of block speech
    audio = [block_speech(calibration_s, seed=seed * 1000 + 900 + i) for i in range(clips)]
    hidden, frames = _encoder_hidden(model, [a for a, _ in audio])
    on, off = [], []
    for i, (_, voiced) in enumerate(audio):
        n = min(int(frames[i]), len(voiced))
        v, s = _clean_frames(voiced[:n])
        on.append(hidden[i, :n][torch.from_numpy(v).to(dev)])
        off.append(hidden[i, :n][torch.from_numpy(s).to(dev)])
    mu_on, mu_off = torch.cat(on).float().mean(0), torch.cat(off).float().mean(0)
    gap = mu_on - mu_off
    w = 2 * gap / gap.dot(gap)  # q(x) = w . (x - mid): -1 at the silent mean, +1 at the voiced mean
    mid = (mu_on + mu_off) / 2
    proj = model.encoder_projector
    faint = randn(*proj.weight.shape) * 0.05 / math.sqrt(proj.weight.shape[1])  # the encoder's faint rest
    faint[: 2 + n_dur] = 0.0
    proj.weight.copy_(faint)
    proj.bias.zero_()
    proj.weight[0], proj.bias[0] = w, -w.dot(mid)
    proj.weight[1], proj.bias[1] = -w, w.dot(mid)

    # 4. the predictor's output after each label (from the start state), centred and normalised
    ids = torch.arange(labels, device=dev)
    _, sos = lstm(dec.embedding(torch.full((1, 1), blank, device=dev)))
    state = tuple(s.expand(-1, labels, -1).contiguous() for s in sos)
    out, _ = lstm(dec.embedding(ids).unsqueeze(1), state)
    pred = torch.relu(dec.decoder_projector(out[:, 0])).float()
    pattern = pred[:, rest]
    centre = pattern.mean(0)
    u = _unit(pattern - centre)

    # 5. token rows: after label k the next token of one walk through the vocabulary wins
    first = 2 if labels > 8 else 0  # never emit <unk> / <pad>
    walk = (torch.randperm(labels - 1 - first, generator=gen) + first).tolist()
    following = {blank: walk[0], **{a: b for a, b in zip(walk, walk[1:] + walk[:1], strict=True)}}
    token_rows = torch.zeros(labels, pattern.shape[1], device=dev)
    after = torch.tensor(list(following), device=dev)
    token_rows.index_add_(0, torch.tensor(list(following.values()), device=dev), u[after])
    token_rows = _unit(token_rows)
    scores = (pattern - centre) @ token_rows.t()  # [label k, token]: token logits after k (unit scale)
    scores[:, blank] = -1e4
    top2 = scores.topk(2, dim=1).values
    live = torch.tensor([blank, *walk], device=dev)
    s_tok = target_margin / float((top2[live, 0] - top2[live, 1]).median())
    weight = torch.zeros_like(head.weight, dtype=torch.float32)
    bias = torch.zeros_like(head.bias, dtype=torch.float32)
    weight[:labels, rest] = token_rows * s_tok
    best_token = top2[live, 0] * s_tok
    bias[:labels] = -(token_rows @ centre) * s_tok + target_margin - float(best_token.median())
    unused = torch.ones(labels, dtype=torch.bool, device=dev)
    unused[live] = False
    bias[:labels][unused] = -4 * target_margin

    # 6. durations: the code unit of each jump; a small bias picks jump 1 after the start symbol
    code_on = float(pred[live][:, jump].max(dim=1).values.median())
    s_dur = 1.25 * target_margin / code_on
    for j in range(n_dur):
        weight[labels + j, jump[j]] = s_dur
    bias[labels + min(1, n_dur - 1)] = 0.25 * target_margin

    # 7. blank: beats the median label's best token by 2 x target_margin on the silent mean, loses by
    #    as much on the voiced mean (a steeper slope would only amplify the encoder's rounding)
    s_blank = 2 * target_margin
    weight[blank, acoustic] = torch.tensor([-s_blank, s_blank], device=dev)
    bias[blank] = target_margin
    head.weight.copy_(weight)
    head.bias.copy_(bias)
    return {"token_scale": s_tok, "duration_scale": s_dur, "blank_scale": s_blank,
            "voicing_gap_norm": float(gap.norm()), "hidden_norm": float(mid.norm())}


def _encoder_hidden(model: torch.nn.Module, clips: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder output (before the joint's projection) and frame counts, fp32 reference path."""
    from asr.parakeet.features import LogMelFeatures

    dev = next(model.parameters()).device
    lengths = torch.tensor([len(c) for c in clips])
    audio = torch.zeros(len(clips), int(lengths.max()))
    for i, clip in enumerate(clips):
        audio[i, : len(clip)] = torch.from_numpy(clip)
    feats, frames = LogMelFeatures()(audio, lengths)
    mask = torch.arange(feats.shape[1]).unsqueeze(0) < frames.unsqueeze(1)
    dtype = next(model.parameters()).dtype
    with torch.inference_mode():
        out = model.get_audio_features(input_features=feats.to(dev, dtype), attention_mask=mask.to(dev))
    return out.last_hidden_state.clone(), out.attention_mask.sum(-1).cpu()


@torch.no_grad()
def limit_band(model: torch.nn.Module, max_hz: float) -> int:
    """Make the encoder deaf above ``max_hz`` (a telephone-band model): zero the subsampling's output
    columns whose receptive field reaches a mel bin with any response above ``max_hz``.

    Audio resampled up from 8 kHz carries nothing above 4 kHz but the resampler's stopband and
    rounding noise, tens of dB down yet several units apart in log-mel from one resampler to the
    next; a model that hears only the band below can judge such audio by its speech alone.
    Returns the number of mel bins (from the lowest) the encoder still hears.
    """
    from asr.parakeet.features import FeatureConfig, slaney_mel_filterbank

    enc = model.config.encoder_config
    features = FeatureConfig(n_mels=enc.num_mel_bins)
    filters = slaney_mel_filterbank(features)
    hz = np.arange(filters.shape[1]) * features.sample_rate / features.n_fft
    top = (hz[None, :] * (filters > 0)).max(axis=1)  # each bin's highest frequency (bins rise with it)
    heard = int((top <= max_hz).sum())
    layers = int(math.log2(enc.subsampling_factor))
    stride = enc.subsampling_conv_stride
    radius = (enc.subsampling_conv_kernel_size - 1) // 2 * (stride**layers - 1)  # mel bins each side
    width = enc.num_mel_bins // stride**layers  # frequency positions after subsampling
    keep = torch.tensor([f * stride**layers + radius < heard for f in range(width)], dtype=torch.float32)
    if not keep.any():
        raise ValueError(f"max_hz={max_hz}: no subsampled frequency position lies wholly below it")
    linear = model.encoder.subsampling.linear  # input columns: channel-major, then frequency
    linear.weight.view(linear.out_features, -1, width).mul_(keep.to(linear.weight))
    return heard


def build_reference_model(seed: int = 0, vocab_size: int = 256, layers: int = 2, hidden: int = 64,
                          target_margin: float = 6.0, band_hz: float | None = None) -> torch.nn.Module:
    """The tiny architecture (fp32, CPU) with :func:`sharpen_decisions` applied: the reference model
    for checking fast paths (bf16, compiled, graphed, fused) against the plain loop. No tokenizer
    (token ids are what is compared), so it builds without sentencepiece, e.g. on a GPU image.
    ``band_hz``: hear only below it (:func:`limit_band`), for checks across sample rates."""
    from transformers import ParakeetForTDT

    torch.manual_seed(seed)
    model = ParakeetForTDT(tiny_config(vocab_size, layers, hidden, hidden)).eval().requires_grad_(False)
    _randomize(model, seed)
    if band_hz is not None:
        limit_band(model, band_hz)
    sharpen_decisions(model, seed=seed, target_margin=target_margin)
    return model
