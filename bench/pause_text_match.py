"""Would a reply started at the caller's pause have answered the right words? Real ASR models, recorded prompts.

``llm.speculate = "quiet"`` starts the reply on Parakeet's partial of the audio up to where the VAD begins its
stop window (``asr.pause.CallerPauseFrame``) and keeps it only if the final transcript at the VAD's stop reads the
same. Cadence's GPU benchmarks run random-weight Parakeet, which emits tokens over silence too, so there the two
differ and every such speculation is withdrawn: they cannot tell what a trained model gives. This measures it on
real weights: each of the capacity run's recorded prompts (Debian's Asterisk set, as the phone line hands them
on) is replayed through the agent's Silero analyzer in 40 ms frames to find the pause that ends it (the start of
the stop window that runs out) and the stop; the audio up to the pause, rounded up to the streaming ASR's next
160 ms chunk, and the audio up to the stop are transcribed by Whisper tiny.en and Moonshine tiny (the embedded
models, on this CPU), and the two texts compared as the speculation compares them (pipecat's
``NormalizedMatch``: case, punctuation and spacing aside).

Reported per model: how often they match (a confirmed speculation), and the head start: the stop minus the
pause's chunk end, the time the reply gets before the VAD's stop (smart-turn's verdict comes after it too).
Also the pauses inside the prompts where the caller went on (each a withdrawn speculation: wasted work).

    python bench/pause_text_match.py          # -> bench/results/pause_text_match_cpu/pause_text_match.json
"""

from __future__ import annotations

import argparse
import asyncio
import audioop
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FRAME_MS = 40
CHUNK_S = 0.16  # Parakeet's streaming chunk (asr.chunk_ms of examples/gpu.toml): a partial covers whole chunks
TAIL_S = 1.0


async def pauses(ulaw: bytes, config) -> tuple[np.ndarray, float | None, float | None, int]:
    """(16 kHz audio, final pause onset s, VAD stop s, pauses the caller went on after) for one prompt."""
    from pipecat.audio.vad.vad_analyzer import VADState

    from agent.capacity.phone_caller import FRAME
    from agent.pipeline import make_vad
    from transports.phone.codec import PolyphaseUpsampler

    ulaw = ulaw + b"\xff" * (-len(ulaw) % FRAME) + b"\xff" * int(8000 * TAIL_S)
    upsample = PolyphaseUpsampler(2)
    vad = make_vad(config)
    vad.set_sample_rate(16000)
    step = 8 * FRAME_MS
    pcm, onset, stop, resumed, last = [], None, None, 0, VADState.QUIET
    for k in range(0, len(ulaw) - step + 1, step):
        chunk = upsample.process(audioop.ulaw2lin(ulaw[k:k + step], 2))
        pcm.append(chunk)
        state = await vad.analyze_audio(chunk)
        at = (k + step) / 8000.0
        if state == VADState.STOPPING and last == VADState.SPEAKING:
            onset = at
        elif state == VADState.SPEAKING and last == VADState.STOPPING:
            resumed += 1
        elif state == VADState.QUIET and last in (VADState.STOPPING, VADState.SPEAKING) and stop is None:
            stop = at
            if last == VADState.SPEAKING:  # the window ran out within this frame: it began in it
                onset = at
        last = state
    audio = np.frombuffer(b"".join(pcm), dtype="<i2").astype(np.float32) / 32768.0
    return audio, onset, stop, resumed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", type=Path, default=ROOT / ".cascade/prompts.npz")
    ap.add_argument("--limit", type=int, default=0, help="the first N prompts only (0: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/pause_text_match_cpu")
    args = ap.parse_args()

    from pipecat.turns.user_stop import NormalizedMatch

    from agent.capacity.corpus import read_ulaw_pack, recorded_prompts, write_ulaw_pack
    from agent.config import Config
    from agent.models import moonshine_model_dir, whisper_model_dir
    from asr.moonshine.model import shared_moonshine_model
    from asr.whisper_model import shared_whisper_model, transcribe_greedy
    from bench.common import write_result

    if not args.pack.exists():
        write_ulaw_pack(args.pack, recorded_prompts())
    config = Config()
    config.vad.batch_windows = False
    whisper = shared_whisper_model(str(whisper_model_dir()), "cpu", "int8")
    moonshine = shared_moonshine_model(str(moonshine_model_dir()))
    models = {
        "whisper-tiny.en": lambda a: transcribe_greedy(whisper, a, "en", config.asr.no_speech_prob),
        "moonshine-tiny": lambda a: moonshine.transcribe(a),
    }
    match = NormalizedMatch()
    rows, resumed_total = [], 0
    for name, ulaw in read_ulaw_pack(args.pack)[: args.limit or None]:
        audio, onset, stop, resumed = asyncio.run(pauses(ulaw, config))
        resumed_total += resumed
        if onset is None or stop is None:
            continue
        cut = min(stop, np.ceil(onset / CHUNK_S) * CHUNK_S)  # the partial's audio: whole chunks past the pause
        row = {"name": name, "pause_s": round(onset, 3), "partial_s": round(cut, 3), "stop_s": round(stop, 3),
               "head_start_ms": round((stop - cut) * 1000.0, 1)}
        for label, transcribe in models.items():
            early, final = transcribe(audio[: int(cut * 16000)]), transcribe(audio[: int(stop * 16000)])
            row[label] = {"at_pause": early, "final": final, "match": bool(final) and match.matches(early, final)}
        rows.append(row)
    summary = {"prompts": len(rows), "pauses_resumed": resumed_total,
               "head_start_ms": {k: round(float(v), 1) for k, v in zip(
                   ("p10", "p50", "p90"), np.percentile([r["head_start_ms"] for r in rows], [10, 50, 90]), strict=True)}}
    for label in models:
        hits = sum(r[label]["match"] for r in rows)
        summary[label] = {"match": hits, "of": len(rows), "rate": round(hits / max(1, len(rows)), 3)}
        print(f"{label}: the text at the pause is the final's in {hits} of {len(rows)} prompts")
        for r in rows:
            if not r[label]["match"]:
                print(f"   {r['name']:30s} [{r[label]['at_pause']}] -> [{r[label]['final']}]")
    h = summary["head_start_ms"]
    print(f"head start (VAD stop - the pause's chunk end) p10/p50/p90 {h['p10']}/{h['p50']}/{h['p90']} ms; "
          f"pauses the caller went on after: {resumed_total} in {len(rows)} prompts")
    path = write_result("pause_text_match", {"chunk_s": CHUNK_S, "frame_ms": FRAME_MS, "summary": summary,
                                             "prompts": rows}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
