"""Render a ``Transcript`` in the OpenAI transcription response formats."""

from __future__ import annotations

import json
import math
from typing import Any

from asr.offline.results import Transcript

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")

# OpenAI's verbose_json names the language in full ("english"); codes we do not know pass through.
_LANGUAGE_NAMES = {
    "en": "english", "de": "german", "fr": "french", "es": "spanish", "it": "italian",
    "pt": "portuguese", "nl": "dutch", "pl": "polish", "ru": "russian", "uk": "ukrainian",
    "ja": "japanese", "zh": "chinese", "ko": "korean", "ar": "arabic", "hi": "hindi",
}


def _clock(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(t: Transcript) -> str:
    blocks = [
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(t.segments, start=1)
    ]
    return "\n".join(blocks) + ("\n" if blocks else "")


def to_vtt(t: Transcript) -> str:
    cues = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in t.segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def to_verbose(t: Transcript, words: bool) -> dict[str, Any]:
    """OpenAI's ``verbose_json``; per-segment decoder statistics are not kept, so they read 0."""
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": _LANGUAGE_NAMES.get(t.language, t.language),
        "duration": round(t.duration, 3),
        "text": t.text,
        "segments": [
            {
                "id": s.id, "seek": 0, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                "tokens": [], "temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 0.0,
                "no_speech_prob": 0.0,
            }
            for s in t.segments
        ],
        "usage": _usage(t),
    }
    if words:
        body["words"] = [{"word": w.text.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
                         for w in t.words]
    return body


def _usage(t: Transcript) -> dict[str, Any]:
    return {"type": "duration", "seconds": int(math.ceil(t.duration))}


def render(t: Transcript, response_format: str, words: bool = False) -> tuple[str, str]:
    """Return ``(body, content_type)`` for one of ``RESPONSE_FORMATS``."""
    if response_format == "json":
        return json.dumps({"text": t.text, "usage": _usage(t)}), "application/json"
    if response_format == "verbose_json":
        return json.dumps(to_verbose(t, words)), "application/json"
    if response_format == "text":
        return t.text + "\n", "text/plain"
    if response_format == "srt":
        return to_srt(t), "application/x-subrip"
    if response_format == "vtt":
        return to_vtt(t), "text/vtt"
    raise ValueError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, not {response_format!r}")
