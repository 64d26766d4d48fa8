"""Speculative LLM requests on the caller's partial transcript, before the turn ends.

A stop strategy (``SpeculativeTurnAnalyzerStopStrategy`` for smart-turn, ``SpeculativeSpeechTimeoutStopStrategy``
for plain silence) starts the reply as soon as the caller seems to have paused, on the best text so far:
the turn's finals plus the newest partial. It uses pipecat's own speculation plumbing: the user aggregator
runs the request against a provisional copy of the context, the LLM service's ``SpeculationGate`` holds
every frame of the reply, and the turn end either confirms it (``confirms_speculation``: the held tokens
are released, no second request, the context gets the final transcript) or withdraws it
(``EagerEndOfTurnCancelFrame``: the LLM stage cancels the request, which closes its HTTP stream, and the
turn's own request follows). Nothing speculative reaches the caller or the context before the final
confirms it. With ``llm.speculate_tts`` (``agent.pipeline.build_worker``) the reply is held after the TTS instead,
as audio (``agent.speculative_audio_gate``), so it is synthesized during the wait too.

Triggers (``llm.speculate``, comma-separated):

- ``pause``: the VAD says the caller stopped; speculate on the newest partial.
- ``quiet``: the VAD began counting its stop window (``asr.pause.CallerPauseFrame``, ~0.2 s before its stop):
  speculate on the partial Parakeet makes of everything heard up to then (``ParakeetPartial.at_pause``), so
  the reply (and with ``llm.speculate_tts`` its audio) is under way while the stop window and smart-turn run.
  Withdrawn at once if the caller speaks again inside the window.
- ``stable``: a partial the STT marks stable (``ParakeetPartial.stable``: ``stable_partials`` in a row)
  whose text has held for at least ``stable_ms`` of audio, while the caller may still be talking.
- ``final``: a final transcript arrives while the caller is quiet and the turn is still open (the turn
  detector undecided: smart-turn judged the sentence unfinished, or the silence timeout runs).

Withdrawn when the caller goes on (a VAD start, or a newer partial or final whose text the speculation
does not match) or when the turn's final text differs (normalized: case, punctuation, spacing).

A speculative request that wants a tool call is withdrawn by the LLM service itself (pipecat's
``LLMService.run_function_calls``: a tool's side effects cannot be held back, so it broadcasts an
``EagerEndOfTurnCancelFrame`` instead of running it). Its upstream copy reaches the stop strategy through the user
aggregator; the speculation is then forgotten (and its text not speculated on again this turn), so the turn end
makes the turn's own request, which runs the tool. A withdrawal that comes back only after the turn end confirmed
the speculation (the two crossed) leaves the turn unanswered; it then asks the aggregator for that request
(``LLMRunFrame``: the context already holds the turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loguru import logger
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    Frame,
    InterimTranscriptionFrame,
    LLMRunFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.turns.types import ProcessFrameResult, UserTurnSpeculation
from pipecat.turns.user_stop import (
    EagerMatchPolicy,
    NormalizedMatch,
    SpeechTimeoutUserTurnStopStrategy,
    TurnAnalyzerUserTurnStopStrategy,
)
from pipecat.utils.string import TextPartForConcatenation, concatenate_aggregated_text

from agent.finished_text_stop import FinishedTextStopMixin
from agent.quiet_turn_stop import QuietTurnEndMixin
from agent.segment_turn_stop import SegmentedTurnAnalyzerStopStrategy
from agent.withdrawn_speculation import mark_withdrawn
from asr.pause import CallerPauseFrame

TRIGGERS = ("pause", "stable", "final", "quiet")


def parse_triggers(text: str) -> frozenset[str]:
    """``"pause,final"`` (or ``"pause+final"``, for lists that are comma-separated themselves: a benchmark's
    ``SERVE_SETS``) -> {"pause", "final"}; ``""`` or ``"off"`` -> none. Unknown names raise ValueError."""
    names = {t.strip().lower() for t in text.replace("+", ",").split(",") if t.strip()} - {"off", "none"}
    unknown = names - set(TRIGGERS)
    if unknown:
        raise ValueError(f"llm.speculate: unknown trigger(s) {sorted(unknown)} (known: {', '.join(TRIGGERS)}; "
                         "empty or 'off' disables)")
    return frozenset(names)


@dataclass
class SpeculationStats:
    """Counters over every caller of a process (``Engines.speculation_stats``)."""

    started: dict[str, int] = field(default_factory=dict)  # by trigger
    confirmed: int = 0  # turn ended with the speculated text: its reply was used
    # by reason: resumed (VAD start), newer_partial, final_differs, unresolved (turn ended otherwise), tool_call (the
    # LLM service withdrew it: the reply wants a tool, which runs on the confirmed turn)
    withdrawn: dict[str, int] = field(default_factory=dict)

    @property
    def total_started(self) -> int:
        return sum(self.started.values())

    @property
    def wasted(self) -> int:
        """Requests made and thrown away."""
        return sum(self.withdrawn.values())

    def snapshot(self) -> dict:
        return {"started": dict(self.started), "confirmed": self.confirmed, "withdrawn": dict(self.withdrawn),
                "wasted": self.wasted}


@dataclass(frozen=True)
class SpeculationPolicy:
    triggers: frozenset[str]
    stable_ms: float = 600.0
    match: EagerMatchPolicy = field(default_factory=NormalizedMatch)


class SpeculativeStopMixin:
    """Adds speculation to a pipecat stop strategy; put it first in the bases."""

    def __init__(self, *args, policy: SpeculationPolicy, stats: SpeculationStats | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._policy = policy
        self.speculation_stats = stats if stats is not None else SpeculationStats()
        self._finals: list[TextPartForConcatenation] = []
        self._partial = ""
        self._partial_since: float | None = None  # utterance audio seconds when this partial text first came
        self._paused = False  # the VAD's last word was a stop
        self._quiet = False  # the VAD is counting its stop window (CallerPauseFrame)
        self._trigger = ""  # what started the speculation in flight
        self._turn_open = False
        self._speculation: UserTurnSpeculation | None = None
        self._confirmed: UserTurnSpeculation | None = None  # confirmed by this turn's end, until the next turn
        self._tool_text: str | None = None  # this turn's text whose speculative reply wants a tool call

    # ------------------------------------------------------------------ turn text
    def _turn_text(self, partial: str = "") -> str:
        """What the aggregator would write for the turn if it ended now with ``partial`` as a final."""
        parts = [*self._finals, TextPartForConcatenation(partial, includes_inter_part_spaces=False)]
        return concatenate_aggregated_text(parts).strip()

    # ------------------------------------------------------------------ frames
    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._paused = self._quiet = False
            self._partial, self._partial_since = "", None
            await self._withdraw("resumed")
        elif isinstance(frame, CallerPauseFrame):
            self._quiet = frame.quiet
            if not frame.quiet and self._trigger == "quiet":
                await self._withdraw("resumed")  # spoken again inside the stop window: the text will grow
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._paused, self._quiet = True, False
            if "pause" in self._policy.triggers and self._partial:
                await self._speculate(self._turn_text(self._partial), "pause")
        elif isinstance(frame, InterimTranscriptionFrame):
            await self._on_interim(frame)
        elif isinstance(frame, EagerEndOfTurnCancelFrame):
            await self._withdrawn_by_llm()
        elif isinstance(frame, TranscriptionFrame) and frame.text.strip():
            # Before the wrapped strategy sees it: it may end the turn on this very frame.
            self._finals.append(TextPartForConcatenation(frame.text,
                                                         includes_inter_part_spaces=frame.includes_inter_frame_spaces))
            self._partial, self._partial_since = "", None
        result = await super().process_frame(frame)
        if isinstance(frame, TranscriptionFrame) and frame.text.strip() and self._turn_open:
            text = self._turn_text()
            if not self._matches(text):
                await self._withdraw("final_differs")
                # A final processed after the caller already went on (smart-turn's analysis of the VAD
                # stop can hold it back) answers a turn that is not over: no speculation on it.
                if "final" in self._policy.triggers and self._paused:
                    await self._speculate(text, "final")
        return result

    async def _on_interim(self, frame: InterimTranscriptionFrame) -> None:
        text = frame.text.strip()
        if not text:
            return
        partial = frame.result  # ParakeetPartial from asr.parakeet.stt_service, or anything else
        audio_s = getattr(getattr(partial, "result", None), "audio_s", None)
        if text != self._partial:
            self._partial, self._partial_since = text, audio_s
        guess = self._turn_text(text)
        if self._speculation is not None and not self._matches(guess):
            await self._withdraw("newer_partial")  # the caller went on
        if self._speculation is not None:
            return
        if self._paused and "pause" in self._policy.triggers:
            await self._speculate(guess, "pause")
        elif self._quiet and "quiet" in self._policy.triggers and getattr(partial, "at_pause", False):
            await self._speculate(guess, "quiet")
        elif "stable" in self._policy.triggers and getattr(partial, "stable", False):
            span = None if audio_s is None or self._partial_since is None else audio_s - self._partial_since
            if span is not None and span * 1000.0 >= self._policy.stable_ms:
                await self._speculate(guess, "stable")

    def _matches(self, text: str) -> bool:
        return self._speculation is not None and self._policy.match.matches(self._speculation.text, text)

    async def _withdrawn_by_llm(self) -> None:
        """An ``EagerEndOfTurnCancelFrame`` from downstream: the LLM service withdrew the speculative request
        (it wants a tool call). Our own withdrawals go out from the aggregator and never come back here."""
        if self._speculation is not None:
            self._tool_text = self._speculation.text
            # Withdrawn again from here: if this withdrawal was for an earlier request that crossed ours, the
            # newer one still in flight must not be released at the turn end next to the turn's own request.
            await self._withdraw("tool_call")
        elif self._confirmed is not None and not self._turn_open:
            # It crossed the turn end that confirmed it: the LLM had withdrawn the reply before it saw that end,
            # and the aggregator wrote the turn without a request. Request it now.
            self._confirmed = None
            stats = self.speculation_stats
            stats.confirmed -= 1
            stats.withdrawn["tool_call"] = stats.withdrawn.get("tool_call", 0) + 1
            logger.debug(f"{self}: confirmed speculative reply was withdrawn for a tool call: requesting the turn")
            await self.push_frame(LLMRunFrame())

    # ------------------------------------------------------------------ speculation in and out
    async def _speculate(self, text: str, trigger: str) -> None:
        if not text or not self._turn_open:
            return
        if self._tool_text is not None and self._policy.match.matches(self._tool_text, text):
            return  # it would want the tool call again: the turn end's request runs it
        if self._speculation is not None:
            if self._matches(text):
                return  # already answering this text
            await self._withdraw("final_differs" if trigger == "final" else "newer_partial")
        self._speculation, self._trigger = UserTurnSpeculation(text=text), trigger
        stats = self.speculation_stats
        stats.started[trigger] = stats.started.get(trigger, 0) + 1
        logger.debug(f"{self}: speculative LLM request ({trigger}) on [{text}]")
        await self.trigger_user_turn_inference_triggered(speculation=self._speculation)

    async def _withdraw(self, reason: str) -> None:
        if self._speculation is None:
            return
        logger.debug(f"{self}: speculative request withdrawn ({reason}): [{self._speculation.text}]")
        mark_withdrawn(self._speculation)  # if its request is still queued at the LLM stage, it never runs
        self._speculation, self._trigger = None, ""
        stats = self.speculation_stats
        stats.withdrawn[reason] = stats.withdrawn.get(reason, 0) + 1
        await self.trigger_user_turn_speculation_cancelled()

    async def trigger_user_turn_stopped(self, *, enable_user_speaking_frames: bool | None = None):
        """The wrapped strategy ends the turn: keep the speculative reply only if the final text matches."""
        if self._speculation is not None and self._matches(self._turn_text()):
            self._confirmed, self._speculation, self._trigger = self._speculation, None, ""
            self.speculation_stats.confirmed += 1
            logger.debug(f"{self}: speculative reply confirmed by the final transcript")
            await self.trigger_user_turn_finalized(enable_user_speaking_frames=enable_user_speaking_frames,
                                                   confirms_speculation=True)
            return
        await self._withdraw("final_differs")
        await super().trigger_user_turn_stopped(enable_user_speaking_frames=enable_user_speaking_frames)

    async def handle_user_turn_started(self):
        self._finals, self._partial, self._partial_since = [], "", None
        self._confirmed, self._tool_text = None, None
        await self._withdraw("unresolved")
        self._turn_open = True
        await super().handle_user_turn_started()

    async def handle_user_turn_stopped(self):
        # A turn ended by something else (the stop watchdog): withdraw before its own request is queued.
        await self._withdraw("unresolved")
        self._turn_open = False
        self._finals, self._partial, self._partial_since = [], "", None
        await super().handle_user_turn_stopped()


class SpeculativeTurnAnalyzerStopStrategy(FinishedTextStopMixin, SpeculativeStopMixin,
                                          TurnAnalyzerUserTurnStopStrategy):
    """Smart-turn end of turn with speculative replies (and ``finished_text_secs``: agent.finished_text_stop)."""


class SpeculativeSpeechTimeoutStopStrategy(SpeculativeStopMixin, SpeechTimeoutUserTurnStopStrategy):
    """Silence end of turn with speculative replies."""


class SpeculativeSegmentedTurnAnalyzerStopStrategy(QuietTurnEndMixin, SpeculativeStopMixin,
                                                   SegmentedTurnAnalyzerStopStrategy):
    """Smart-turn end of turn over a segmented ASR (one final per VAD segment), speculating on finals.

    With ``min_quiet_secs`` (agent.quiet_turn_stop; before the speculation mixin, so a held turn end neither
    confirms nor withdraws) the reply requested on the final is generated while the quiet is confirmed."""
