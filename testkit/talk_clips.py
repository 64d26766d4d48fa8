"""The clips ``cadence talk`` is checked on: real recorded prompts, short answers and multi-part turns.

A multi-part clip is two prompts joined by a pause a caller makes mid-sentence (0.6 s: longer
than the VAD's stop window, shorter than the turn's silence fallback), so the turn spans two
VAD segments and both must reach the LLM with no word lost at the seam.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testkit.corpus import pick
from transports.audio_io import load_audio

SINGLE = ["auth-thankyou", "hello", "vm-goodbye", "spy-agent", "tt-weasels", "agent-pass", "conf-onlyperson",
          "privacy-unident", "ss-noservice", "pbx-invalid"]
JOINED = [("vm-nomore", "queue-thankyou"), ("conf-getpin", "vm-toforward")]
PAUSE_S = 0.6


@dataclass
class Clip:
    name: str
    text: str
    audio: np.ndarray


def talk_clips(rate: int = 16000, single: list[str] | None = None,
               joined: list[tuple[str, str]] | None = None) -> list[Clip]:
    """The clips at ``rate`` (mono float32); skips the test when the Asterisk prompts are missing."""
    single = SINGLE if single is None else single
    joined = JOINED if joined is None else joined
    clips = [Clip(p.name, p.text, load_audio(p.path, rate)) for p in pick(single)]
    for a, b in joined:
        pa, pb = pick([a, b])
        pause = np.zeros(int(PAUSE_S * rate), dtype=np.float32)
        audio = np.concatenate([load_audio(pa.path, rate), pause, load_audio(pb.path, rate)])
        clips.append(Clip(f"{a}+{b}", f"{pa.text} {pb.text}", audio))
    return clips


def recorded_phrase(names: list[str], rate: int = 16000, gap_s: float = 0.12) -> Clip:
    """Recorded prompts (single words too, e.g. ``digits/day-2``) spoken as one phrase, ``gap_s`` apart."""
    prompts = pick(names)
    gap = np.zeros(int(gap_s * rate), dtype=np.float32)
    parts = [x for p in prompts for x in (load_audio(p.path, rate), gap)][:-1]
    return Clip("+".join(names), " ".join(p.text for p in prompts), np.concatenate(parts))
