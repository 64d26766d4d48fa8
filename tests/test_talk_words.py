"""``cadence talk``'s code path on real recorded speech: every word reaches the transcript.

Short answers, a prompt with a pause inside it, and two prompts joined by a 0.6 s pause (two VAD
segments, often two turns): the normalised word error rate of each is at most 0.2, none is empty,
no stage time is negative, and no transcript lands after its turn's LLM request. Whisper tiny.en,
the embedded llama.cpp server and Piper, in process.
"""

from __future__ import annotations

import asyncio

from agent.commands import _talk_once
from agent.config import load_config
from testkit.corpus import wer
from testkit.talk_clips import talk_clips


def test_recorded_utterances_keep_their_words():
    config = load_config(None, ["llm.max_tokens=12"])  # the words heard are under test, not the reply
    clips = talk_clips(config.audio.in_sample_rate, single=["spy-agent", "pbx-invalid"],
                       joined=[("vm-nomore", "queue-thankyou")])
    result = asyncio.run(_talk_once(config, [c.audio for c in clips]))
    report = [(c.name, round(wer(c.text, t.transcript), 2), t.transcript, t.stages_ms)
              for c, t in zip(clips, result.turns, strict=True)]
    print(*report, sep="\n")
    late = [t.transcript_text for t in result.timings if t.late_transcripts]
    assert not late, f"transcripts pushed after the LLM request started (words the LLM never got): {late}"
    for name, error, heard, stages in report:
        assert heard, f"{name}: nothing transcribed"
        assert error <= 0.2, (name, heard)
        assert all(v >= 0 for v in stages.values()), (name, stages)
