"""Silero VAD and smart-turn v3 analyzers that share one ONNX session per process.

Stock pipecat loads a fresh ``onnxruntime.InferenceSession`` for every caller's Silero VAD and
smart-turn analyzer: about 130 + 150 ms of CPU on the event loop per connect (measured on the
2-core box), so 256 callers connecting within seconds would stall every live call for tens of
seconds. The sessions are stateless (Silero's recurrent state and context live in Python, per
caller) and ``InferenceSession.run`` is thread-safe, so one session per process serves every
caller; each caller keeps its own state. Written against pipecat 1.14's analyzers.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

import onnxruntime as ort
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams
from pipecat.utils.env import env_truthy

from agent.quiet_volume import QuietGateVolumeTracker
from agent.turn_ends import CountedTurnEnds

_LOCK = threading.Lock()
_SESSIONS: dict[str, ort.InferenceSession] = {}


def _session(key: str, package: str, name: str, intra_threads: int = 1) -> ort.InferenceSession:
    with _LOCK:
        if key not in _SESSIONS:
            opts = ort.SessionOptions()
            opts.inter_op_num_threads = 1
            opts.intra_op_num_threads = intra_threads
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            path = str(resources.files(package).joinpath(name))
            _SESSIONS[key] = ort.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=opts)
        return _SESSIONS[key]


def silero_session() -> ort.InferenceSession:
    return _session("silero", "pipecat.audio.vad.data", "silero_vad.onnx")


def smart_turn_session() -> ort.InferenceSession:
    return _session("smart-turn-v3", "pipecat.audio.turn.smart_turn.data", "smart-turn-v3.2-cpu.onnx")


class _SileroState(SileroOnnxModel):
    """One caller's Silero state over the process's shared session."""

    def __init__(self, session: ort.InferenceSession):  # noqa: D107 (no super(): it would load a session)
        self.session = session
        self.reset_states()
        self.sample_rates = [8000, 16000]


class SharedSileroVADAnalyzer(SileroVADAnalyzer):
    """``SileroVADAnalyzer`` with the process's shared session (per-caller state as stock)."""

    def __init__(self, *, sample_rate: int | None = None, params: VADParams | None = None, quiet_gate: bool = False):
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)
        if quiet_gate:  # the same volume, without its loudness measure on windows too quiet to pass its gate
            self._volume_tracker = QuietGateVolumeTracker()
        self._model = _SileroState(silero_session())
        self._windows_since_reset = 0
        self._low_confidence_windows = 0


class SharedSmartTurnAnalyzerV3(CountedTurnEnds, LocalSmartTurnAnalyzerV3):
    """``LocalSmartTurnAnalyzerV3`` (bundled model, one thread per inference) on the shared session."""

    def __init__(self, **kwargs: Any):
        BaseSmartTurn.__init__(self, **kwargs)
        self._log_data = env_truthy("PIPECAT_SMART_TURN_LOG_DATA", default=False)
        self._session = smart_turn_session()
