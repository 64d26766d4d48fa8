"""Distinct caller utterances: recorded telephone prompts and synthetic questions.

Recorded speech comes from Debian's ``asterisk-core-sounds-en-wav`` (Allison, 8 kHz);
synthetic speech from ``espeak-ng`` (or ``flite``), rendered once into a cache directory.
Each caller gets its own slice of the corpus, so no two callers at a level say the same thing.
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transports.audio_io import load_audio

ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
QUESTIONS = (
    "What time do you open tomorrow morning?",
    "Can you tell me a fun fact about the moon?",
    "How do I reset my password?",
    "What is the weather usually like in spring?",
    "Could you recommend a good book to read?",
    "How long does it take to boil an egg?",
    "What is the capital of Canada?",
    "Can you help me plan a short trip?",
    "Why is the sky blue during the day?",
    "What should I cook for dinner tonight?",
    "How many planets are in the solar system?",
    "Tell me something nice about cats.",
    "Is it better to walk or to run?",
    "What is a good way to learn a new language?",
    "How do plants make their food?",
    "Can you explain what a rainbow is?",
    "What do you know about the ocean?",
    "How can I sleep better at night?",
    "What is your favorite color and why?",
    "Give me a tip for staying focused.",
    "How far away is the sun?",
    "What makes a good cup of coffee?",
    "Can you suggest a name for my dog?",
    "What is the tallest mountain in the world?",
    "How do airplanes stay in the air?",
    "What is a healthy breakfast?",
    "Why do leaves change color in autumn?",
    "How can I save money on groceries?",
    "What games are fun to play with friends?",
    "Tell me a short story about a robot.",
    "Where do penguins live?",
    "How do I make my plants grow faster?",
)


@dataclass(frozen=True)
class Utterance:
    name: str
    audio: np.ndarray  # mono float32 at the pipeline's input rate

    @property
    def seconds(self) -> float:
        return len(self.audio) / 16000.0


def _duration(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / float(w.getframerate())


def recorded_prompts(min_s: float = 1.2, max_s: float = 3.5, root: Path = ASTERISK_DIR) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in sorted(root.glob("*.wav")) if min_s <= _duration(p) <= max_s]


def synthetic_questions(cache_dir: Path) -> list[Path]:
    """Render ``QUESTIONS`` with espeak-ng (or flite) once; return the WAV paths."""
    espeak, flite = shutil.which("espeak-ng"), shutil.which("flite")
    if not espeak and not flite:
        return []
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for i, text in enumerate(QUESTIONS):
        path = cache_dir / f"q{i:02d}.wav"
        if not path.exists():
            cmd = ([espeak, "-s", "165", "-w", str(path), text] if espeak
                   else [flite, "-voice", "slt", "-t", text, "-o", str(path)])
            subprocess.run(cmd, check=True, capture_output=True, timeout=30)
        out.append(path)
    return out


def load_corpus(cache_dir: Path, sample_rate: int = 16000, limit: int | None = None) -> list[Utterance]:
    """Recorded and synthetic utterances interleaved, each loaded at ``sample_rate``."""
    recorded = recorded_prompts()
    synthetic = synthetic_questions(cache_dir)
    paths: list[Path] = []
    for i in range(max(len(recorded), len(synthetic))):
        if i < len(synthetic):
            paths.append(synthetic[i])
        if i < len(recorded):
            paths.append(recorded[i])
        if limit is not None and len(paths) >= limit:
            break
    if not paths:
        raise FileNotFoundError(f"no utterances: install asterisk-core-sounds-en-wav or espeak-ng "
                                f"(looked in {ASTERISK_DIR})")
    return [Utterance(p.stem, load_audio(p, sample_rate)) for p in paths[:limit]]


def deal(corpus: list[Utterance], caller: int, turns: int, callers: int) -> list[Utterance]:
    """Caller ``caller``'s ``turns`` utterances: disjoint across callers while the corpus lasts."""
    return [corpus[(caller + k * callers) % len(corpus)] for k in range(turns)]


# ------------------------------------------------------------------ phone callers: 8 kHz mu-law prompts
def _pcm8k(path: Path) -> bytes:
    """A WAV as 16-bit PCM at 8 kHz (the Asterisk prompts already are; others are resampled)."""
    with wave.open(str(path)) as w:
        if w.getframerate() == 8000 and w.getsampwidth() == 2 and w.getnchannels() == 1:
            return w.readframes(w.getnframes())
    audio = load_audio(path, 8000)
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def write_ulaw_pack(out: Path, paths: list[Path]) -> Path:
    """Pack prompts as one ``.npz`` of 8 kHz mu-law (what a GPU machine without the Debian sounds reads)."""
    import audioop

    blobs = [audioop.lin2ulaw(_pcm8k(p), 2) for p in paths]
    offsets = np.cumsum([0] + [len(b) for b in blobs])
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, names=np.array([p.stem for p in paths]), offsets=offsets,
                        ulaw=np.frombuffer(b"".join(blobs), dtype=np.uint8))
    return out


def read_ulaw_pack(path: Path) -> list[tuple[str, bytes]]:
    data = np.load(path)
    ulaw, offsets = data["ulaw"].tobytes(), data["offsets"]
    return [(str(n), ulaw[offsets[i]:offsets[i + 1]]) for i, n in enumerate(data["names"])]


def pack_audio_16k(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A pack's prompts as the phone line hands them to the ASR: mu-law decoded, upsampled to 16 kHz by the
    line's own polyphase upsampler; (float32 (B, T) zero-padded, samples per row (B,))."""
    import audioop

    from transports.phone.codec import PolyphaseUpsampler

    rows = []
    for _name, ulaw in read_ulaw_pack(path):
        pcm16k = PolyphaseUpsampler(2).process(audioop.ulaw2lin(ulaw, 2))
        rows.append(np.frombuffer(pcm16k, dtype="<i2").astype(np.float32) / 32768.0)
    if not rows:
        raise ValueError(f"{path}: no prompts in the pack")
    audio = np.zeros((len(rows), max(len(r) for r in rows)), dtype=np.float32)
    for i, r in enumerate(rows):
        audio[i, : len(r)] = r
    return audio, np.array([len(r) for r in rows], dtype=np.int64)


def phone_prompts(pack: Path | None = None, cache_dir: Path | None = None, limit: int | None = None) -> list:
    """Distinct prompts for phone callers: a ``write_ulaw_pack`` file, else the recorded Asterisk prompts
    and the synthetic questions (interleaved, as ``load_corpus``)."""
    from agent.capacity.phone_caller import Prompt

    if pack is not None:
        prompts = [Prompt.from_ulaw(name, ulaw) for name, ulaw in read_ulaw_pack(pack)]
    else:
        recorded = recorded_prompts()
        synthetic = synthetic_questions(cache_dir) if cache_dir is not None else []
        paths = [p for pair in zip(synthetic, recorded, strict=False) for p in pair]
        paths += recorded[len(synthetic):] + synthetic[len(recorded):]
        prompts = [Prompt.from_pcm8k(p.stem, _pcm8k(p)) for p in paths]
    if not prompts:
        raise FileNotFoundError(f"no prompts: give --prompts (a pack from write_ulaw_pack), or install "
                                f"asterisk-core-sounds-en-wav or espeak-ng (looked in {ASTERISK_DIR})")
    return prompts[:limit]
