"""smart-turn served by the engine process: one batched model for every caller of every session process.

Engine side, ``TurnHost.handle`` answers ``turn`` {id} (payload: 16 kHz float32 samples, the turn's audio)
with ``reply`` {id, probability} from the process's ``TurnBatcher``, or ``error`` {id, message}.

Session side, ``RemoteSmartTurnAnalyzer`` is pipecat's ``BaseSmartTurn`` (the same buffering, pre-speech
margin, 8 s cap and ``TurnMetricsData``) whose prediction is that request instead of an ONNX run in a
thread of its own. When the engine process cannot answer (restarting, down, or slower than
``timeout_s``) the turn is scored by the process's shared ONNX session instead, so no turn waits on it;
that fallback is counted (``fallbacks``) and logged once per analyzer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn
from pipecat.metrics.metrics import MetricsData, TurnMetricsData

from agent.turn_ends import TURN_ENDS, CountedTurnEnds
from transports.engine_link import EngineUnavailable, Links

MODEL_RATE = 16000


class TurnHost:
    """One connection's ``turn`` requests on the engine process's ``TurnBatcher``."""

    def __init__(self, batcher: Any, send: Callable[[dict], None]):
        self.batcher = batcher
        self._send = send
        self._tasks: set[asyncio.Task] = set()

    def handle(self, header: dict, payload: bytes) -> None:
        task = asyncio.create_task(self._answer(header.get("id"), payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, rid: Any, payload: bytes) -> None:
        """One request's reply; a malformed one gets an ``error`` for its id, and the connection goes on."""
        try:
            if not payload or len(payload) % 4:
                raise ValueError(f"a turn request needs float32 samples, got {len(payload)} bytes")
            audio = np.frombuffer(payload, dtype="<f4")
            if not np.isfinite(audio).all():
                raise ValueError("a turn request with samples that are not finite")
            probability = await self.batcher.predict(audio)
        except Exception as exc:
            self._send({"op": "error", "id": rid, "message": f"{type(exc).__name__}: {exc}"})
        else:
            self._send({"op": "reply", "id": rid, "probability": probability})

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()


class RemoteTurnModel:
    """The session side of ``turn`` requests over one connection per event loop."""

    def __init__(self, path: str, connect_timeout_s: float = 2.0):
        self.path = path
        self._links = Links(path, connect_timeout_s)

    async def probability(self, audio16k: np.ndarray, timeout_s: float) -> float:
        conn = await self._links.get()
        rid = conn.next_id()
        with conn.inbox(rid) as inbox:
            conn.send({"op": "turn", "id": rid}, np.asarray(audio16k, dtype="<f4").tobytes())
            header, _ = await asyncio.wait_for(inbox.get(), timeout_s)
        if header["op"] == "reply":
            return float(header["probability"])
        if header["op"] == "error":
            raise RuntimeError(f"the engine's turn model failed: {header.get('message')}")
        raise conn.error or EngineUnavailable("the engine connection was lost")


_MODELS: dict[str, RemoteTurnModel] = {}


def remote_turn_model(path: str) -> RemoteTurnModel:
    """The process's client for the engine at ``path`` (one per socket: its connections are per loop)."""
    if path not in _MODELS:
        _MODELS[path] = RemoteTurnModel(path)
    return _MODELS[path]


class RemoteSmartTurnAnalyzer(CountedTurnEnds, BaseSmartTurn):
    """pipecat's smart-turn analyzer whose model runs batched in the engine process at ``socket``."""

    def __init__(self, socket: str, *, timeout_s: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self._remote = remote_turn_model(socket)
        self._timeout_s = timeout_s
        self._fallback: Any = None
        self.fallbacks = 0

    def segment(self) -> np.ndarray:
        """The turn's audio as pipecat's ``_process_speech_segment`` cuts it (float32, the pipeline's rate)."""
        buffer = self._audio_buffer
        if not buffer:
            return np.zeros(0, np.float32)
        margin_s = (self._params.pre_speech_ms / 1000) + self._vad_start_secs
        start_time = self._speech_start_time - margin_s
        start = next((i for i, (t, _) in enumerate(buffer) if t >= start_time), 0)
        audio = np.concatenate([chunk for _, chunk in buffer[start:]]).astype(np.float32) / 32768.0
        return audio[-int(self._params.max_duration_secs * self.sample_rate):]

    def _to_model_rate(self, audio: np.ndarray) -> np.ndarray:
        if self.sample_rate == MODEL_RATE:
            return audio
        import soxr

        return soxr.resample(audio, self.sample_rate, MODEL_RATE, quality="HQ").astype(np.float32)

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        audio = self.segment()
        if audio.size == 0:
            return EndOfTurnState.INCOMPLETE, None
        t0 = time.perf_counter()
        audio16k = self._to_model_rate(audio)
        try:
            probability = await self._remote.probability(audio16k, self._timeout_s)
        except (EngineUnavailable, RuntimeError, TimeoutError, OSError) as exc:
            probability = await self._local(audio16k, exc)
        complete = probability > 0.5
        metrics = TurnMetricsData(processor="RemoteSmartTurnAnalyzer", is_complete=complete, probability=probability,
                                  e2e_processing_time_ms=(time.perf_counter() - t0) * 1000)
        state = EndOfTurnState.COMPLETE if complete else EndOfTurnState.INCOMPLETE
        if complete:
            self._clear(state)
            TURN_ENDS["model"] += 1  # (this method replaces CountedTurnEnds', which counts the ONNX analyzer's)
            self.last_complete_by = "model"
        return state, metrics

    async def _local(self, audio16k: np.ndarray, why: BaseException) -> float:
        """The turn scored here, on the process's shared ONNX session (the engine could not answer)."""
        from agent.shared_models import SharedSmartTurnAnalyzerV3

        if self._fallback is None:
            logger.warning(f"smart-turn: the engine process did not answer ({why!r}); scoring on this CPU")
            self._fallback = SharedSmartTurnAnalyzerV3(sample_rate=MODEL_RATE)
        self.fallbacks += 1
        result = await asyncio.get_running_loop().run_in_executor(
            self._model_executor, self._fallback._predict_endpoint, audio16k)
        return float(result["probability"])

    def _predict_endpoint(self, audio_array: np.ndarray) -> dict[str, Any]:  # BaseSmartTurn's abstract seam
        raise NotImplementedError("RemoteSmartTurnAnalyzer scores turns in analyze_end_of_turn")
