"""Assemble the cascade: transport in -> VAD -> ASR -> user turn -> LLM -> TTS -> transport out.

``Engines`` holds what is loaded once per process (ASR model, TTS voice, the LLM endpoint);
``build_worker`` makes a fresh per-caller pipeline on top of them (VAD, turn analyzer and
context are per caller, because they hold state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from loguru import logger
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn, SmartTurnParams
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import NOT_GIVEN, LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from agent.call_control import CallControl
from agent.call_control import install as install_call_control
from agent.config import CallConfig, Config, ConfigError
from agent.fast_barge_in import FastBargeIn
from agent.finished_text_stop import FinishedTextTurnAnalyzerStopStrategy
from agent.inline_observer import call_inline
from agent.input_audio_stop import InputAudioStop
from agent.llm_replicas import ReplicaPicker, replica_urls
from agent.llm_stage import CadenceLLMService
from agent.models import piper_voice
from agent.observer_fanout import FanOutObserver
from agent.openai_http import llm_http_client
from agent.segment_turn_stop import QuietSegmentedTurnAnalyzerStopStrategy
from agent.shared_models import SharedSileroVADAnalyzer, SharedSmartTurnAnalyzerV3
from agent.speculative_audio_gate import SpeculativeAudioGate
from agent.speculative_turn import (
    SpeculationPolicy,
    SpeculationStats,
    SpeculativeSegmentedTurnAnalyzerStopStrategy,
    SpeculativeSpeechTimeoutStopStrategy,
    SpeculativeStopMixin,
    SpeculativeTurnAnalyzerStopStrategy,
    parse_triggers,
)
from agent.timed_vad import TimedVADProcessor
from agent.tool_calls import ToolCallStyle, register_tools
from agent.transcripts import CallTranscript
from agent.turn_ends import TurnEndNote, VadTurnEnds, count_stop_timeouts
from agent.user_aggregator import CadenceAggregatorPair
from agent.vad_batcher import BatchedSileroVADAnalyzer
from tts.engines import TTSEngine, create_engine
from tts.phrase_cache import PhraseCache, phrase_cache_for
from tts.service import CadenceTTSService

# ASR engines that transcribe each VAD segment after its stop (one transcript per segment).
SEGMENTED_ENGINES = frozenset({"whisper", "moonshine"})
SEGMENTED_TRIGGERS = frozenset({"final"})


@dataclass
class Engines:
    """Process-wide resources shared by every caller."""

    config: Config
    llm_base_url: str
    llm_model: str
    tts_engine: TTSEngine
    # The engine process's hello when ``server.engine_socket`` is set (it hosts the TTS, and Parakeet when
    # ``info["asr"]``); None: every engine in this process.
    engine_info: dict[str, Any] | None = None
    speculation_stats: SpeculationStats = field(default_factory=SpeculationStats)
    bot: Any = None  # agent.bot.Bot: its tools and tool choice for every call (its settings are in config)
    _llm_http: tuple[Any, Any] | None = field(default=None, repr=False)
    _llm_picker: ReplicaPicker | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from agent.models import resolve_asr_engine

        resolve_asr_engine(self.config.asr)  # a Config built in code (not load_config) may still say "auto"

    def llm_url_for_call(self) -> str:
        """The LLM server a new call talks to for its whole life: one of ``llm_base_url``'s (comma-separated)
        servers in turn (agent/llm_replicas.py)."""
        if self._llm_picker is None:
            self._llm_picker = ReplicaPicker(replica_urls(self.llm_base_url))
        return self._llm_picker.pick()

    def llm_http(self) -> Any:
        """One HTTP connection pool to the LLM server for every caller on this event loop.

        A client per session costs ~25 ms of TLS-context setup on the loop at each connect; a
        client is bound to the loop it first ran on, so another loop gets its own.
        """
        loop = asyncio.get_running_loop()
        if self._llm_http is None or self._llm_http[0] is not loop:
            self._llm_http = (loop, llm_http_client(max_connections=1000, max_keepalive=100))
        return self._llm_http[1]

    @classmethod
    def load(cls, config: Config, llm_base_url: str, llm_model: str,
             measure: Callable[[str, Callable[[], Any]], Any] | None = None) -> Engines:
        """Load and warm every engine; ``measure(stage, fn)`` (GPU memory peaks) wraps each stage's part."""
        measure = measure or (lambda _stage, fn: fn())
        parse_triggers(config.llm.speculate)  # a bad llm.speculate fails at start, not at the first call
        engines = measure("tts", lambda: cls._with_tts(config, llm_base_url, llm_model))
        measure("asr", engines.warm_asr)
        engines.warm_llm()
        logger.info(f"engines ready: asr={config.asr.engine} tts={engines.tts_engine.name} llm={llm_base_url}")
        return engines

    @classmethod
    def _with_tts(cls, config: Config, llm_base_url: str, llm_model: str) -> Engines:
        info = None
        if config.server.engine_socket:  # the engine process owns the TTS (agent.engine_process)
            from tts.remote.client import RemoteTTSEngine, hello

            info = hello(config.server.engine_sockets[0])  # the first hosts Parakeet too, unless split
            tts: TTSEngine = RemoteTTSEngine(config.server.engine_sockets, name=info["name"],
                                             sample_rate=int(info["sample_rate"]))
        else:
            tts = create_engine(config.tts, piper_voice)
        if config.server.asr_engine_socket:  # streaming Parakeet in an engine process of its own
            from tts.remote.client import hello

            info = {**(info or {}), "asr": hello(config.server.asr_engine_socket)["asr"]}
        engines = cls(config, llm_base_url, llm_model, tts, info)
        engines.warm_tts()
        return engines

    def warm_asr(self) -> None:
        """Load the model and run it once: the first call pays one-off allocation costs."""
        if self.config.asr.engine == "whisper":
            import numpy as np

            from agent.models import resolve_whisper_path
            from asr.whisper_model import shared_whisper_model, transcribe_greedy

            model = shared_whisper_model(resolve_whisper_path(self.config.asr), self.config.asr.device,
                                         self.config.asr.compute_type, self.config.asr.cpu_threads)
            noise = np.random.default_rng(0).normal(0, 0.01, 16000).astype(np.float32)
            transcribe_greedy(model, noise, self.config.asr.language, 1.0)
        elif self.config.asr.engine == "moonshine":
            import numpy as np

            from agent.models import resolve_moonshine_path, whisper_model_dir
            from asr.moonshine.model import shared_moonshine_model
            from asr.moonshine.stt import whisper_fallback

            asr = self.config.asr
            model = shared_moonshine_model(resolve_moonshine_path(asr), asr.cpu_threads)
            noise = np.random.default_rng(0).normal(0, 0.01, 16000).astype(np.float32)
            model.transcribe(noise)
            fallback = whisper_fallback(asr, model, str(whisper_model_dir()) if asr.fallback == "whisper" else None)
            if fallback is not None:  # a bad asr.fallback fails here, at start
                fallback.whisper(noise)
        elif self.remote_asr:
            return  # loaded and warmed in the engine process
        elif self.config.asr.engine == "parakeet":
            from asr.parakeet.shared_engine import warm_parakeet

            warm_parakeet(self.config.asr)

    @property
    def remote_asr(self) -> bool:
        """Whether streaming Parakeet runs in the engine process."""
        return bool(self.engine_info and self.engine_info.get("asr"))

    def warm_tts(self) -> None:
        for _ in self.tts_engine.synthesize("Hello there."):
            pass

    def warm_llm(self) -> None:
        """One short completion with the system prompt (and the bot's tools), so its prefix is cached
        server-side.

        A server that cannot be reached is not fatal here: callers then hear the apology.
        """

        body = {"model": self.llm_model or "default", "max_tokens": 1, "stream": False,
                "messages": [{"role": "system", "content": self.config.llm.system_prompt},
                             {"role": "user", "content": "Hello."}]}
        if self.bot is not None and self.bot.tools:
            body["tools"] = [{"type": "function", "function": t.schema.to_default_dict()} for t in self.bot.tools]
        for url in replica_urls(self.llm_base_url):
            try:
                httpx.post(f"{url}/chat/completions", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {self.config.llm.api_key}"})
            except httpx.HTTPError as exc:
                logger.warning(f"LLM warm-up failed ({exc}); the LLM server at {url} may be down")

    def _final_from_pause(self) -> bool:
        """``asr.final_from_pause`` where pauses are marked (the quiet trigger): elsewhere no pause partial ever comes,
        and following every chunk's level would be work on each caller's audio for nothing."""
        config = self.config
        return config.asr.final_from_pause and "quiet" in parse_triggers(config.llm.speculate)

    def make_stt(self) -> Any:
        asr = self.config.asr
        if asr.engine == "whisper":
            from agent.models import resolve_whisper_path
            from asr.whisper_stt import create_whisper_stt

            return create_whisper_stt(asr, resolve_whisper_path(asr))
        if asr.engine == "moonshine":
            from agent.models import resolve_moonshine_path, whisper_model_dir
            from asr.moonshine.stt import create_moonshine_stt

            return create_moonshine_stt(asr, resolve_moonshine_path(asr),
                                        str(whisper_model_dir()) if asr.fallback == "whisper" else None)
        if asr.engine == "parakeet" and self.remote_asr:
            from asr.parakeet.remote import RemoteStreamBatcher
            from asr.parakeet.stt_service import ParakeetSTTService

            assert self.engine_info is not None
            remote = self.engine_info["asr"]
            socket = self.config.server.asr_engine_socket or self.config.server.engine_sockets[0]
            return ParakeetSTTService(RemoteStreamBatcher(socket, remote["sample_rate"]),
                                      model_name=remote["model"], language=asr.language,
                                      ttfs_p99_latency=asr.ttfs_p99_s, final_from_pause=self._final_from_pause())
        if asr.engine == "parakeet":
            from asr.parakeet.stt_service import create_parakeet_stt

            return create_parakeet_stt(asr, final_from_pause=self._final_from_pause())
        raise ValueError(f"unknown asr.engine {asr.engine!r} (whisper, moonshine, parakeet)")


def make_vad_processor(config: Config) -> VADProcessor:
    """The VAD stage; it reports how late it hears the caller's audio where the transport stamps its arrival (the
    phone line: stage ``phone_input_lag``)."""
    from transports.phone.stats import PHONE_STATS

    # llm.speculate's "quiet": Parakeet's partial is asked for at the pause (segmented engines have no partials)
    pause_frames = config.asr.engine == "parakeet" and "quiet" in parse_triggers(config.llm.speculate)
    return TimedVADProcessor(vad_analyzer=make_vad(config), on_lag=PHONE_STATS.input_lag, pause_frames=pause_frames)


def make_vad(config: Config) -> SileroVADAnalyzer:
    """Silero VAD on the process's shared ONNX session (a caller's connect costs no model load).

    With ``vad.batch_windows`` the windows of all the process's callers are scored together
    (``agent.vad_batcher``); with ``vad.quiet_gate`` a window too quiet for the volume measure's gate skips it.
    """
    v = config.vad
    params = VADParams(confidence=v.confidence, start_secs=v.start_secs, stop_secs=v.stop_secs,
                       min_volume=v.min_volume)
    if v.batch_windows:
        return BatchedSileroVADAnalyzer(params=params, quiet_gate=v.quiet_gate)
    return SharedSileroVADAnalyzer(params=params, quiet_gate=v.quiet_gate)


TURN_MODELS = ("onnx", "engine")


def make_turn_analyzer(config: Config) -> BaseSmartTurn:
    """smart-turn on this process's shared ONNX session, or batched in the engine process (``vad.turn_model``)."""
    params = SmartTurnParams(stop_secs=config.vad.turn_fallback_secs)
    if config.vad.turn_model == "engine":
        from agent.engine_process import turn_socket
        from agent.smart_turn.remote import RemoteSmartTurnAnalyzer

        socket = turn_socket(config)
        if not socket:
            raise ConfigError('vad.turn_model = "engine" needs an engine process (server.engine_process = true)')
        return RemoteSmartTurnAnalyzer(socket, params=params)
    if config.vad.turn_model != "onnx":
        raise ConfigError(f"vad.turn_model = {config.vad.turn_model!r}: expected one of {', '.join(TURN_MODELS)}")
    return SharedSmartTurnAnalyzerV3(params=params)


def make_turn_strategies(config: Config, speculation_stats: SpeculationStats | None = None) -> UserTurnStrategies:
    """End of turn: smart-turn with a short silence fallback, or plain VAD silence.

    Stock smart-turn waits ~3 s of silence when it misjudges a finished sentence; the
    fallback here is ``vad.turn_fallback_secs`` (``vad.turn_finished_text_secs`` when the newest final
    transcript reads as a finished sentence). With ``llm.speculate`` set, the stop strategy also starts
    speculative replies (``agent.speculative_turn``): on Parakeet's partials and finals, and for the
    segmented engines (Whisper, Moonshine) on a final that lands while the turn detector still waits or the
    turn end waits for ``vad.turn_min_quiet_secs`` of quiet (``agent.quiet_turn_stop``).
    """
    from agent.models import resolve_asr_engine

    resolve_asr_engine(config.asr)  # "auto" (a Config built in code) -> the engine it will be
    triggers = parse_triggers(config.llm.speculate)
    if config.asr.engine in SEGMENTED_ENGINES:
        triggers &= SEGMENTED_TRIGGERS  # no partials: only a final can be speculated on
    spec = {}
    if triggers:
        spec = {"policy": SpeculationPolicy(triggers, config.llm.speculate_stable_ms), "stats": speculation_stats}
    if config.vad.turn == "silence":
        timeout_cls = SpeculativeSpeechTimeoutStopStrategy if triggers else SpeechTimeoutUserTurnStopStrategy
        stop = [timeout_cls(user_speech_timeout=config.vad.turn_fallback_secs, **spec)]
    else:
        analyzer = make_turn_analyzer(config)
        finished = config.vad.turn_finished_text_secs
        finished_secs = finished if finished >= 0 else None
        # Whisper and Moonshine transcribe per VAD segment: the turn must wait for its last segment's text.
        # They also hold the turn end for vad.turn_min_quiet_secs of quiet (agent.quiet_turn_stop).
        if config.asr.engine in SEGMENTED_ENGINES:
            strategy = (SpeculativeSegmentedTurnAnalyzerStopStrategy if triggers
                        else QuietSegmentedTurnAnalyzerStopStrategy)
            stop = [strategy(turn_analyzer=analyzer, finished_text_secs=finished_secs,
                             min_quiet_secs=config.vad.turn_min_quiet_secs,
                             unfinished_quiet_secs=config.vad.turn_unfinished_quiet_secs, **spec)]
        else:
            strategy = SpeculativeTurnAnalyzerStopStrategy if triggers else FinishedTextTurnAnalyzerStopStrategy
            stop = [strategy(turn_analyzer=analyzer, finished_text_secs=finished_secs, **spec)]
    # Only VAD starts a turn: a segment's transcript that lands after the turn ended must not
    # open a new turn and interrupt the answer (stock pipecat also starts turns on transcripts).
    return UserTurnStrategies(start=[VADUserTurnStartStrategy()], stop=stop)


def fixed_phrases(config: Config) -> list[str]:
    """What the bot says word for word on many calls: its greeting, idle prompt, goodbyes, filler, apologies."""
    call, llm = config.call, config.llm
    return [call.greeting, call.idle_prompt, call.goodbye, call.max_duration_goodbye, call.filler,
            call.tool_error_reply, llm.apology, llm.empty_reply]


def phrase_cache(engines: Engines) -> PhraseCache | None:
    """The process's recordings of the fixed phrases for its TTS engine (``tts.cache_phrases``)."""
    if not engines.config.tts.cache_phrases:
        return None
    return phrase_cache_for(engines.tts_engine, fixed_phrases(engines.config))


def build_worker(
    engines: Engines,
    transport: BaseTransport,
    *,
    observers: Sequence[BaseObserver] = (),
    pre_stages: Sequence[Any] = (),
    audio_out_sample_rate: int | None = None,
    session_id: str = "call",
    ended_by: Callable[[], str | None] | None = None,
) -> PipelineWorker:
    """A fresh pipeline for one caller on the shared engines.

    ``audio_out_sample_rate`` lets a transport take TTS audio at its own rate (8 kHz for phone
    lines), so audio is resampled once. A transport with ``has_own_barge_in`` (the phone line's
    clear-and-hold) gets no ``FastBargeIn`` stage on top. The bot's tools (``engines.bot``) are
    registered on the LLM; ``[call]`` adds the greeting, idle prompts and the transcript. With speculation and
    ``llm.speculate_tts`` a ``SpeculativeAudioGate`` after the TTS holds a speculative reply's audio.
    """
    config = engines.config
    fast_barge_in = config.vad.fast_barge_in and not getattr(transport, "has_own_barge_in", False)
    strategies = make_turn_strategies(config, engines.speculation_stats)
    note_turn_ends(strategies, transport)
    # llm.speculate_tts: a speculative reply is synthesized during the turn end's wait, its audio held after the TTS
    hold_audio = config.llm.speculate_tts and any(isinstance(s, SpeculativeStopMixin) for s in strategies.stop)
    stt = engines.make_stt()
    llm = CadenceLLMService(config.llm, engines.llm_url_for_call(), engines.llm_model, http_client=engines.llm_http(),
                            hold_after_tts=hold_audio)
    tts = CadenceTTSService(engines.tts_engine, withdraw_on_cancel=hold_audio, phrase_cache=phrase_cache(engines),
                            first_clause_max_words=config.tts.first_clause_max_words)
    control = CallControl(session_id, config.call)
    control.llm = llm
    context = make_context(engines.bot, llm, control, config.call)
    # pipecat's pair, with each speculative request naming its speculation (agent.user_aggregator)
    user_aggregator, assistant_aggregator = CadenceAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=strategies, user_idle_timeout=config.call.idle_after_s))

    count_stop_timeouts(user_aggregator, session_id)

    call = config.call
    transcript = None
    if call.transcripts_dir or call.webhook_url:
        transcript = CallTranscript(session_id, call.transcripts_dir, call.webhook_url,
                                    webhook_attempts=call.webhook_attempts, webhook_timeout_s=call.webhook_timeout_s)
    pipeline = Pipeline(
        [
            transport.input(),
            *pre_stages,
            *([FastBargeIn()] if fast_barge_in else []),
            make_vad_processor(config),
            stt,
            user_aggregator,
            *([] if config.audio.forward_input_past_turn else [InputAudioStop()]),
            llm,
            tts,
            *([SpeculativeAudioGate()] if hold_audio else []),
            transport.output(),
            assistant_aggregator,
        ]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(
            audio_in_sample_rate=config.audio.in_sample_rate,
            audio_out_sample_rate=audio_out_sample_rate or config.audio.out_sample_rate,
            enable_metrics=True,
        ),
        # one proxy for all of the call's observers (agent/observer_fanout.py), not one queue and task each
        observers=[fan_out := FanOutObserver([*observers, *([transcript] if transcript else [])])],
        enable_rtvi=False,
        idle_timeout_secs=None,
    )
    if config.runtime.inline_observers:  # ...and no proxy at all: called in place (agent/inline_observer.py)
        call_inline(worker, fan_out)
    install_call_control(worker, user_aggregator, control, transcript, ended_by)
    worker.cadence_call = control  # type: ignore[attr-defined]  (talk reads its tool log)
    worker.cadence_transcript = transcript  # type: ignore[attr-defined]
    return worker


def note_turn_ends(strategies: UserTurnStrategies, transport: BaseTransport) -> TurnEndNote:
    """One note per call of what ended its latest turn: the stop strategies write it, the transport's output reads
    it where it can tell the far end (the phone line's mark names, ``transports/phone/marks.py``)."""
    noting = [s for s in strategies.stop if hasattr(s, "turn_end_note")]
    note = TurnEndNote() if noting else VadTurnEnds()  # no turn model: the VAD's silence ends every turn
    for strategy in noting:
        strategy.turn_end_note = note
    output = transport.output()
    if hasattr(output, "turn_end_note"):
        output.turn_end_note = note
    return note


def make_context(bot: Any, llm: CadenceLLMService, control: CallControl, call: CallConfig) -> LLMContext:
    """The caller's context: the bot's tools (registered on ``llm`` for this call) and tool choice."""
    if bot is None or not bot.tools:
        return LLMContext()
    style = ToolCallStyle(filler=call.filler, filler_after_s=call.filler_after_s, error_reply=call.tool_error_reply,
                          timeout_s=call.tool_timeout_s)
    register_tools(llm, bot.tools, style, control, control.tool_log)
    choice = bot.tool_choice if bot.tool_choice is not None else NOT_GIVEN
    return LLMContext(tools=ToolsSchema(standard_tools=[t.schema for t in bot.tools]), tool_choice=choice)
