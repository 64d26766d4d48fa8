"""Real recorded speech with transcripts: Debian's Asterisk prompts (8 kHz telephone audio)."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

SOUNDS = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    path: Path


def _number(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _number(rest))
    return " ".join(_ONES[int(d)] for d in str(n))


def normalize(text: str) -> str:
    """Lower case, words only: digits spelled out, '#' -> pound, '*' -> star, hyphens split."""
    text = text.lower().replace("#", " pound ").replace("*", " star ").replace("-", " ")
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\d+", lambda m: " " + _number(int(m.group())) + " ", text)
    text = re.sub(r"[^a-z' ]+", " ", text).replace("'", "")
    return " ".join(text.split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return float(jiwer.wer(ref, hyp or "<empty>"))


def prompts(min_words: int = 1, max_words: int = 100) -> list[Prompt]:
    """Every prompt with words whose WAV is installed, in name order."""
    if not TRANSCRIPTS.is_file() or not SOUNDS.is_dir():
        pytest.skip("Debian asterisk-core-sounds-en(-wav) is not installed")
    out = []
    with gzip.open(TRANSCRIPTS, "rt", errors="replace") as f:
        for line in f:
            name, sep, text = line.partition(":")
            text = text.strip()
            path = SOUNDS / f"{name.strip()}.wav"
            # Skip tones ("[beep]") and stage directions ("(9 seconds of silence)"): no words to hear.
            if not sep or line.startswith(";") or not path.is_file() or text.startswith("[") or "(" in text:
                continue
            if min_words <= len(normalize(text).split()) <= max_words:
                out.append(Prompt(name.strip(), text, path))
    return out


def pick(names: list[str]) -> list[Prompt]:
    by_name = {p.name: p for p in prompts()}
    missing = [n for n in names if n not in by_name]
    if missing:
        pytest.skip(f"prompts not installed: {missing}")
    return [by_name[n] for n in names]
