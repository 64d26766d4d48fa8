"""Kokoro-82M model configurations: the real v1.0 one (``config.json`` of hexgrad/Kokoro-82M) and a tiny one.

The keys are those of Kokoro's ``config.json``; ``decoder_dim`` and ``asr_res_dim`` are Cadence's
names for two widths that Kokoro's ``Decoder`` hard-codes (1024 and 64): a real config.json lacks
them and gets those values, the tiny config shrinks them so CPU tests run in seconds.
"""

from __future__ import annotations

import copy
from typing import Any

SAMPLE_RATE = 24000

# Kokoro v1.0's phoneme vocabulary (the ids its embeddings were trained on). The US-English symbols are
# misaki's: A=eɪ I=aɪ O=oʊ Q=əʊ W=aʊ Y=ɔɪ T=flap ᵊ=reduced schwa; 0 is the pad/boundary id.
VOCAB: dict[str, int] = {
    ";": 1, ":": 2, ",": 3, ".": 4, "!": 5, "?": 6, "—": 9, "…": 10, '"': 11, "(": 12, ")": 13,
    "“": 14, "”": 15, " ": 16, "\u0303": 17, "ʣ": 18, "ʥ": 19, "ʦ": 20, "ʨ": 21, "ᵝ": 22, "\uab67": 23,
    "A": 24, "I": 25, "O": 31, "Q": 33, "S": 35, "T": 36, "W": 39, "Y": 41, "ᵊ": 42,
    "a": 43, "b": 44, "c": 45, "d": 46, "e": 47, "f": 48, "h": 50, "i": 51, "j": 52, "k": 53, "l": 54,
    "m": 55, "n": 56, "o": 57, "p": 58, "q": 59, "r": 60, "s": 61, "t": 62, "u": 63, "v": 64, "w": 65,
    "x": 66, "y": 67, "z": 68, "ɑ": 69, "ɐ": 70, "ɒ": 71, "æ": 72, "β": 75, "ɔ": 76, "ɕ": 77, "ç": 78,
    "ɖ": 80, "ð": 81, "ʤ": 82, "ə": 83, "ɚ": 85, "ɛ": 86, "ɜ": 87, "ɟ": 90, "ɡ": 92, "ɥ": 99, "ɨ": 101,
    "ɪ": 102, "ʝ": 103, "ɯ": 110, "ɰ": 111, "ŋ": 112, "ɳ": 113, "ɲ": 114, "ɴ": 115, "ø": 116, "ɸ": 118,
    "θ": 119, "œ": 120, "ɹ": 123, "ɾ": 125, "ɻ": 126, "ʁ": 128, "ɽ": 129, "ʂ": 130, "ʃ": 131, "ʈ": 132,
    "ʧ": 133, "ʊ": 135, "ʋ": 136, "ʌ": 138, "ɣ": 139, "ɤ": 140, "χ": 142, "ʎ": 143, "ʒ": 147, "ʔ": 148,
    "ˈ": 156, "ˌ": 157, "ː": 158, "ʰ": 162, "ʲ": 164, "↓": 169, "→": 171, "↗": 172, "↘": 173, "ᵻ": 177,
}

_ISTFTNET = {
    "upsample_kernel_sizes": [20, 12],
    "upsample_rates": [10, 6],
    "gen_istft_hop_size": 5,
    "gen_istft_n_fft": 20,
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "resblock_kernel_sizes": [3, 7, 11],
    "upsample_initial_channel": 512,
}

KOKORO_V1_CONFIG: dict[str, Any] = {
    "istftnet": _ISTFTNET,
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
    "vocab": VOCAB,
}

TINY_CONFIG: dict[str, Any] = {
    **KOKORO_V1_CONFIG,
    "istftnet": {**_ISTFTNET, "upsample_initial_channel": 16, "resblock_kernel_sizes": [3, 5],
                 "resblock_dilation_sizes": [[1, 3], [1, 3]]},
    "hidden_dim": 16,
    "n_layer": 1,
    "style_dim": 8,
    "text_encoder_kernel_size": 5,
    "decoder_dim": 16,
    "asr_res_dim": 4,
    "plbert": {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32,
               "max_position_embeddings": 512, "num_hidden_layers": 2, "embedding_size": 8},
}

REQUIRED = ("hidden_dim", "n_layer", "n_token", "style_dim", "max_dur", "text_encoder_kernel_size",
            "istftnet", "plbert", "vocab")


class ConfigError(ValueError):
    """A config.json that is not a Kokoro configuration."""


def full_config() -> dict[str, Any]:
    return copy.deepcopy(KOKORO_V1_CONFIG)


def tiny_config() -> dict[str, Any]:
    return copy.deepcopy(TINY_CONFIG)


def normalize(config: dict[str, Any]) -> dict[str, Any]:
    """Check the keys the model needs and fill Cadence's defaults; raise ConfigError naming what is missing."""
    missing = [k for k in REQUIRED if k not in config]
    if missing:
        raise ConfigError(f"not a Kokoro config: missing {', '.join(missing)}")
    out = copy.deepcopy(config)
    out.setdefault("decoder_dim", 1024)
    out.setdefault("asr_res_dim", 64)
    out["plbert"].setdefault("embedding_size", 128)  # AlbertConfig's default, which Kokoro relies on
    out["vocab"] = {str(k): int(v) for k, v in out["vocab"].items()}
    return out


def style_width(config: dict[str, Any]) -> int:
    """Width of one voice-pack row: decoder style then prosody style."""
    return 2 * int(config["style_dim"])
