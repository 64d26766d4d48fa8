"""``InputAudioStop``: the caller's audio stops after the turn analyzer; every other frame passes."""

from __future__ import annotations

from pipecat.frames.frames import InputAudioRawFrame, TextFrame, TranscriptionFrame
from pipecat.tests.utils import run_test

from agent.config import Config
from agent.input_audio_stop import InputAudioStop


async def test_caller_audio_stops_and_everything_else_passes_in_order() -> None:
    audio = InputAudioRawFrame(audio=b"\x00\x01" * 320, sample_rate=16000, num_channels=1)
    down, _ = await run_test(
        InputAudioStop(),
        frames_to_send=[audio, TranscriptionFrame("hello", "caller", "now"), audio, TextFrame("reply")],
        expected_down_frames=[TranscriptionFrame, TextFrame],
    )
    assert [f.text for f in down] == ["hello", "reply"]


def test_the_default_stops_it_and_the_gpu_example_keeps_stock_flow() -> None:
    from pathlib import Path

    from agent.config import load_config

    assert Config().audio.forward_input_past_turn is False
    gpu = load_config(Path(__file__).resolve().parents[1] / "examples" / "gpu.toml")
    assert gpu.audio.forward_input_past_turn is True  # as its H200 figures were measured (runs 52-56)
