"""The caller's pause as the VAD sees it before its stop window runs out.

The VAD's stop (``VADUserStoppedSpeakingFrame``) comes ``vad.stop_secs`` after the caller went quiet (~280 ms after
the last audible sample at the median, ``bench/results/turn_stop_sweep_cpu``). ``CallerPauseFrame`` marks the
start of that window, so a streaming ASR can decode what it has now and a speculative turn can start the reply on
it (``llm.speculate = "quiet"``), and marks the caller resuming before it ran out.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.frames.frames import SystemFrame


@dataclass
class CallerPauseFrame(SystemFrame):
    """``quiet``: the VAD began counting its stop window; not ``quiet``: the caller spoke again before it ran out."""

    quiet: bool = True
