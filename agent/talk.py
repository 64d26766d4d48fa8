"""``cadence talk``: turns through the full cascade from audio files, timed per stage.

The file is played in real time through the same pipeline a live caller gets (VAD, turn
detection, ASR, LLM, TTS); end of speech is the moment the file's last sample was sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from agent.pipeline import Engines, build_worker
from agent.turn_observer import TurnObserver, TurnTiming
from transports.file_transport import CallScript, FileTransport, run_until_script_done
from transports.params import transport_params


@dataclass
class TurnResult:
    transcript: str
    reply: str
    stages_ms: dict[str, float]
    reply_audio: bytes
    interrupted: bool = False

    @property
    def first_audio_ms(self) -> float | None:
        return self.stages_ms.get("eos_to_first_audio")


@dataclass
class TalkResult:
    turns: list[TurnResult] = field(default_factory=list)
    out_sample_rate: int = 24000
    timings: list[TurnTiming] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)  # agent.tool_calls.ToolLog entries, in call order


def _match(timings: list[TurnTiming], eos: float) -> TurnTiming | None:
    """The observer turn whose VAD stop follows this end of speech most closely."""
    candidates = [t for t in timings if t.vad_stop is not None and t.vad_stop >= eos - 0.05]
    return min(candidates, key=lambda t: t.vad_stop) if candidates else None


async def talk(engines: Engines, utterances: list[np.ndarray], *, settle_s: float = 0.3,
               max_wait_s: float = 15.0) -> TalkResult:
    """Play each utterance, wait for the bot's full answer, and time every stage."""
    cfg = engines.config
    script = CallScript(list(utterances), max_wait_s=max_wait_s)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    loop = asyncio.get_running_loop()

    def on_turn(_timing: TurnTiming) -> None:
        loop.call_later(settle_s, script.turn_done.set)

    observer = TurnObserver(on_turn=on_turn)
    worker = build_worker(engines, transport, observers=[observer])
    await run_until_script_done(worker, script)

    out = transport.output()
    result = TalkResult(out_sample_rate=cfg.audio.out_sample_rate, timings=observer.turns,
                        tool_calls=worker.cadence_call.tool_log.calls)
    ends = script.speech_end_times
    last_index = -1
    for i, eos in enumerate(ends):
        nxt = ends[i + 1] if i + 1 < len(ends) else float("inf")
        timing = _match(observer.turns, eos)
        # A file spoken with pauses may hold several turns (the turn analyzer ended one at a
        # pause, the caller went on): what was heard is every turn since the previous file's.
        heard = ""
        if timing is not None:
            parts = [t.transcript_text for t in observer.turns if last_index < t.index <= timing.index]
            heard = " ".join(p for p in parts if p)
            last_index = timing.index
        stages = timing.stages_ms(end_of_speech=eos) if timing else {}
        first_voiced = out.first_voiced_after(eos)
        if first_voiced is not None and first_voiced < nxt:
            stages["eos_to_first_audio"] = (first_voiced - eos) * 1000.0
        audio = b"".join(pcm for at, pcm in out.chunks if eos <= at < nxt)
        result.turns.append(TurnResult(
            transcript=heard,
            reply=timing.reply_text.strip() if timing else "",
            stages_ms=stages,
            reply_audio=audio,
            interrupted=bool(timing and timing.interrupted),
        ))
    return result


def format_turn(turn: TurnResult) -> str:
    order = ["eos_to_transcript", "transcript_to_llm_first_token", "llm_first_token_to_first_clause",
             "llm_first_token_to_tts_first_audio", "tts_first_audio_to_audio_out", "eos_to_llm_first_token",
             "eos_to_first_audio"]
    lines = [f"transcript: {turn.transcript!r}", f"reply:      {turn.reply!r}", "latency (ms):"]
    for key in order:
        value = turn.stages_ms.get(key)
        lines.append(f"  {key:36s} {'-' if value is None else f'{value:8.0f}'}")
    return "\n".join(lines)
