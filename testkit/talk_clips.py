"""The clips ``cadence talk`` and the WebRTC benchmark are checked on: real recorded prompts.

Three kinds (``Clip.kind``):

- ``single``: one recorded prompt.
- ``paused``: one recorded sentence with a pause the caller makes mid-sentence: the prompt's own short
  pause after an unfinished clause ("To leave a message, | please enter a mailbox number.") stretched to
  ``PAUSE_S`` of quiet between the voiced parts (longer than the VAD's stop window, shorter than the turn's
  silence fallback). One utterance: both parts must reach the LLM in one turn, no word lost at the seam.
- ``two_sentences``: two finished prompts joined by ``PAUSE_S`` of silence; with the recordings' own quiet
  the caller is silent 0.8-1.0 s after a finished sentence, which turn-taking treats as the end of a turn, so
  each sentence is answered (two turns, as stock pipecat does too). Every word must still be heard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testkit.corpus import pick
from transports.audio_io import load_audio

SINGLE = ["auth-thankyou", "hello", "vm-goodbye", "spy-agent", "tt-weasels", "agent-pass", "conf-onlyperson",
          "privacy-unident", "ss-noservice", "pbx-invalid"]
# (prompt, the recording's pause after its unfinished first clause, seconds from the start)
PAUSED = [("vm-whichbox", 1.11), ("vm-rec-temp", 1.20)]
JOINED = [("vm-nomore", "queue-thankyou"), ("conf-getpin", "vm-toforward")]
PAUSE_S = 0.6
KINDS = ("single", "paused", "two_sentences")


@dataclass
class Clip:
    name: str
    text: str
    audio: np.ndarray
    kind: str = "single"

    @property
    def expected_answers(self) -> int:
        """Turns a caller expects answered: one per utterance, one per sentence for ``two_sentences``."""
        return 2 if self.kind == "two_sentences" else 1


def talk_clips(rate: int = 16000, single: list[str] | None = None,
               joined: list[tuple[str, str]] | None = None,
               paused: list[tuple[str, float]] | None = None) -> list[Clip]:
    """The clips at ``rate`` (mono float32); skips the test when the Asterisk prompts are missing.

    With no list given: every clip (``SINGLE``, ``PAUSED``, ``JOINED``); given any, the kinds not given are
    left out."""
    if single is None and joined is None and paused is None:
        single, joined, paused = SINGLE, JOINED, PAUSED
    single, joined, paused = single or [], joined or [], paused or []
    clips = [Clip(p.name, p.text, load_audio(p.path, rate)) for p in pick(single)]
    for name, at_s in paused:
        prompt = pick([name])[0]
        clips.append(Clip(f"{name}~pause", prompt.text, stretch_pause(load_audio(prompt.path, rate), at_s, rate),
                          "paused"))
    for a, b in joined:
        pa, pb = pick([a, b])
        pause = np.zeros(int(PAUSE_S * rate), dtype=np.float32)
        audio = np.concatenate([load_audio(pa.path, rate), pause, load_audio(pb.path, rate)])
        clips.append(Clip(f"{a}+{b}", f"{pa.text} {pb.text}", audio, "two_sentences"))
    return clips


def quiet_frames(audio: np.ndarray, rate: int) -> np.ndarray:
    """Per 10 ms frame: True where it is not voiced (``testkit.voiced``'s rule)."""
    from testkit.voiced import VOICED_DB, VOICED_FLOOR

    hop = rate // 100
    n = len(audio) // hop
    rms = np.sqrt(np.mean(audio[: n * hop].reshape(n, hop).astype(np.float64) ** 2, axis=1))
    return rms <= max(VOICED_FLOOR, float(rms.max()) * 10 ** (VOICED_DB / 20))


def stretch_pause(audio: np.ndarray, at_s: float, rate: int, pause_s: float = PAUSE_S) -> np.ndarray:
    """``audio`` with the quiet run of frames nearest ``at_s`` widened to ``pause_s`` (silence inserted)."""
    hop = rate // 100
    quiet = quiet_frames(audio, rate)
    runs, start = [], None
    for i, q in enumerate([*quiet, False]):
        if q and start is None:
            start = i
        elif not q and start is not None:
            if start > 0 and i < len(quiet):  # inside the speech, not its lead-in or tail
                runs.append((start, i))
            start = None
    if not runs:
        raise ValueError("no pause inside the speech")
    first, end = min(runs, key=lambda r: min(abs(r[0] * hop / rate - at_s), abs(r[1] * hop / rate - at_s)))
    missing = int(pause_s * rate) - (end - first) * hop
    if missing <= 0:
        return audio
    cut = (first + end) // 2 * hop
    return np.concatenate([audio[:cut], np.zeros(missing, dtype=audio.dtype), audio[cut:]])


def recorded_phrase(names: list[str], rate: int = 16000, gap_s: float = 0.12) -> Clip:
    """Recorded prompts (single words too, e.g. ``digits/day-2``) spoken as one phrase, ``gap_s`` apart."""
    prompts = pick(names)
    gap = np.zeros(int(gap_s * rate), dtype=np.float32)
    parts = [x for p in prompts for x in (load_audio(p.path, rate), gap)][:-1]
    return Clip("+".join(names), " ".join(p.text for p in prompts), np.concatenate(parts))
