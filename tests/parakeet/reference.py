"""A plain, per-utterance Python implementation of NeMo's greedy TDT semantics (the test oracle).

Frame by frame, one element at a time, no batching and no label looping: at frame ``t`` take
the joint's token argmax and duration argmax; a blank jumps ``max(d, 1)``; a label is emitted at
``t``, advances the LSTM and jumps ``d``; after ``max_symbols`` labels on one frame with jump 0,
move one frame on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RefResult:
    tokens: list[int]
    frames: list[int]
    durations: list[int]
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # h [L, P], c [L, P], pred_out [H]
    time_jump: int


@torch.inference_mode()
def predictor_step(decoder, label: int, h: torch.Tensor, c: torch.Tensor):
    x = decoder.embedding(torch.tensor([[label]], device=h.device))
    out, (h2, c2) = decoder.lstm(x, (h.unsqueeze(1), c.unsqueeze(1)))
    return h2[:, 0], c2[:, 0], decoder.pred_projector(out[:, 0])[0]


@torch.inference_mode()
def sos_state(decoder):
    layers, hidden = decoder.lstm.num_layers, decoder.lstm.hidden_size
    zeros = torch.zeros(layers, hidden, dtype=decoder.param_dtype, device=decoder.device)
    return predictor_step(decoder, decoder.blank_id, zeros, zeros)


@torch.inference_mode()
def reference_decode(decoder, enc_proj: torch.Tensor, length: int, start: int = 0, state=None,
                     time_jump: int = 0, max_symbols: int | None = None) -> RefResult:
    """``enc_proj`` is ``[T, H]`` for one element; frames returned relative to ``start``."""
    max_symbols = max_symbols or decoder.max_symbols_per_frame
    h, c, g = state if state is not None else sos_state(decoder)
    V1 = decoder.num_labels
    t = start + time_jump
    tokens, frames, durs = [], [], []
    count_frame, count = -1, 0
    while t < length:
        hidden = torch.relu(enc_proj[t] + g)
        logits = decoder.joint_head(hidden.unsqueeze(0))[0]
        k = int(torch.argmax(logits[:V1]))
        d = decoder.durations[int(torch.argmax(logits[V1:]))]
        if k == decoder.blank_id:
            t += max(d, 1)
            continue
        tokens.append(k)
        frames.append(t - start)
        durs.append(d)
        count = count + 1 if count_frame == t else 1
        count_frame = t
        h, c, g = predictor_step(decoder, k, h, c)
        t += d
        if d == 0 and count >= max_symbols:
            t += 1
    return RefResult(tokens, frames, durs, (h, c, g), t - length)


def max_symbols_on_a_frame(result: RefResult) -> int:
    best = run = 0
    for i, f in enumerate(result.frames):
        run = run + 1 if i and result.frames[i - 1] == f else 1
        best = max(best, run)
    return best
