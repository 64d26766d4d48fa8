"""Text to Kokoro phoneme ids.

``EspeakG2P`` (the real path): Debian's libespeak-ng (package ``espeak-ng``) through ctypes gives IPA
with tie marks, which is rewritten into the symbols Kokoro was trained on (misaki's US-English set:
``A``=eɪ ``I``=aɪ ``O``=oʊ ``W``=aʊ ``Y``=ɔɪ ``T``=flap ``ᵊ``, ``ʤ``/``ʧ``; the correspondences are those of
misaki's espeak fallback). Kokoro's own G2P (misaki[en]) needs spaCy and a model download at run
time, which Cadence cannot do; espeak is misaki's fallback for out-of-lexicon words and is what
Kokoro's non-English voices use, so a real checkpoint speaks intelligibly through it.
Punctuation is kept (Kokoro's prosody uses it): text is cut at punctuation, each piece is phonemized
and its mark re-attached.

``CharG2P`` maps letters straight onto the vocabulary. It is NOT phonemization: it exists for load
tests on machines without espeak-ng (the H200 image), where only the amount of work matters.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import threading
from typing import Protocol

PUNCT = ",.;:!?—…"
_SPLIT = re.compile(r"([^,.;:!?—…]+)([,.;:!?—…]*)")
_ESPEAK_TIE = "^"
_REWRITES = sorted({
    "ʔˌn\u0329": "ʔn", "ʔn\u0329": "ʔn",
    "a^ɪ": "I", "a^ʊ": "W", "e^ɪ": "A", "ɔ^ɪ": "Y", "o^ʊ": "O",
    "d^ʒ": "ʤ", "t^ʃ": "ʧ", "ə^l": "ᵊl",
    "ʲo": "jo", "ʲə": "jə", "ʲ": "",
    "ɚ": "əɹ", "r": "ɹ", "x": "k", "ç": "k", "ɐ": "ə", "ɬ": "l", "\u0303": "",
}.items(), key=lambda kv: -len(kv[0]))
_US_AFTER = (("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɪə", "iə"), ("ː", ""), ("e", "A"), ("o", "ɔ"), ("ɾ", "T"),
             ("ʔ", "t"), (_ESPEAK_TIE, ""))


class G2P(Protocol):
    name: str

    def phonemes(self, text: str) -> str: ...


class G2PError(RuntimeError):
    """No phonemizer available."""


def espeak_to_kokoro(ipa: str) -> str:
    """Rewrite espeak-ng's US-English IPA (ties as ``^``) into Kokoro's phoneme symbols."""
    for old, new in _REWRITES:
        ipa = ipa.replace(old, new)
    ipa = re.sub(r"(\S)\u0329", r"ᵊ\1", ipa).replace("\u0329", "")
    for old, new in _US_AFTER:
        ipa = ipa.replace(old, new)
    return ipa


def pieces(text: str) -> list[tuple[str, str]]:
    """(words, trailing punctuation) pieces of ``text``; a piece's marks are kept as one string."""
    out = []
    for words, marks in _SPLIT.findall(text.replace("--", "—").replace("...", "…")):
        if words.strip() or marks:
            out.append((words.strip(), marks))
    return out


class EspeakG2P:
    """libespeak-ng (in-process, one global lock: espeak keeps global state)."""

    name = "espeak"
    _lock = threading.Lock()
    _lib: ctypes.CDLL | None = None
    _voice: str | None = None

    def __init__(self, voice: str = "en-us"):
        self.voice = voice
        self._load()

    @classmethod
    def _load(cls) -> ctypes.CDLL:
        with cls._lock:
            if cls._lib is None:
                lib, data = _open_espeak()
                lib.espeak_Initialize.restype = ctypes.c_int
                lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
                lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
                lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
                lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
                # 0x02: AUDIO_OUTPUT_RETRIEVAL (no sound device); data: the folder holding espeak-ng-data
                if lib.espeak_Initialize(0x02, 0, data, 0) < 0:
                    raise G2PError("espeak-ng failed to initialize (espeak-ng-data missing?)")
                cls._lib = lib
            return cls._lib

    def _ipa(self, text: str) -> str:
        lib = self._lib
        assert lib is not None
        data = text.encode("utf-8")
        buf = ctypes.create_string_buffer(data)
        ptr = ctypes.c_void_p(ctypes.addressof(buf))
        mode = 0x02 | 0x80 | (ord(_ESPEAK_TIE) << 8)  # IPA, tie multi-letter phonemes with '^'
        out = []
        with self._lock:
            if EspeakG2P._voice != self.voice:
                if lib.espeak_SetVoiceByName(self.voice.encode()) != 0:
                    raise G2PError(f"espeak-ng has no voice {self.voice!r}")
                EspeakG2P._voice = self.voice
            while ptr.value:
                res = lib.espeak_TextToPhonemes(ctypes.byref(ptr), 1, mode)  # 1: espeakCHARS_UTF8
                if res:
                    out.append(res.decode("utf-8", errors="replace").strip())
        return " ".join(p for p in out if p)

    def phonemes(self, text: str) -> str:
        parts = []
        for words, marks in pieces(text):
            ipa = espeak_to_kokoro(self._ipa(words)) if words else ""
            parts.append((ipa + marks[:1]).strip())
        return " ".join(p for p in parts if p)


def _open_espeak() -> tuple[ctypes.CDLL, bytes | None]:
    """Debian's libespeak-ng, else the one the ``espeakng-loader`` wheel carries (with its data)."""
    system = ctypes.util.find_library("espeak-ng")
    if system:
        try:
            return ctypes.cdll.LoadLibrary(system), None
        except OSError:
            pass
    try:
        import espeakng_loader  # a wheel with libespeak-ng and espeak-ng-data: hosts without apt (the H200 image)

        lib = ctypes.cdll.LoadLibrary(espeakng_loader.get_library_path())
        return lib, os.path.dirname(espeakng_loader.get_data_path()).encode()
    except (ImportError, OSError, RuntimeError):
        raise G2PError("libespeak-ng is not installed (Debian package 'espeak-ng', or the espeakng-loader "
                       "wheel); g2p='chars' serves load tests") from None


class CharG2P:
    """Letters as phoneme symbols (g ->ɡ): a load-test stand-in, not speech."""

    name = "chars"

    def phonemes(self, text: str) -> str:
        out = re.sub(r"\s+", " ", text.lower().replace("g", "ɡ")).strip()
        return out


def make_g2p(kind: str, voice: str = "en-us") -> G2P:
    if kind == "espeak":
        return EspeakG2P(voice)
    if kind in ("chars", "none"):
        return CharG2P()
    raise G2PError(f"unknown g2p {kind!r} (espeak, chars)")


def to_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Vocabulary ids of the symbols Kokoro knows (others dropped, as Kokoro does)."""
    return [vocab[ch] for ch in phonemes if ch in vocab]
