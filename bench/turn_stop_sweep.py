"""How soon a turn ends after the caller's last audible sample, and how often too soon, per VAD stop window.

Every turn's reply waits for the VAD's stop (``vad.stop_secs`` of quiet as Silero scores it) and smart-turn's
verdict there: nothing else in the cascade starts before it (unless a reply is speculated). This replays the
capacity run's recorded prompts (Debian's Asterisk set, ``.cascade/prompts.npz``, as the phone line hands them
on: mu-law decoded, upsampled to 16 kHz, 40 ms frames) through the agent's own Silero analyzer
(``agent.pipeline.make_vad``) and pipecat's smart-turn v3 turn analyzer (the int8 ONNX file, ``vad.turn_model =
"onnx"``; ``--turn engine``: the engine's float torch model on this CPU), exactly as the stop strategy drives
them: each frame is appended with the VAD's speaking flag, each VAD stop asks the model, and the silence fallback
(``vad.turn_fallback_secs``) ends a turn the model keeps judging unfinished. Offline, frame by frame, so the
figures are the policy's, not this machine's speed (the model's inference time is not added).

Per stop window: the caller's last audible sample (the 20 ms frame ``cadence capacity`` clocks from) -> the
turn's end, p10/p50/p90/p99, and how each turn ended: at a VAD stop inside the prompt (``early``: the caller
was cut off mid-prompt, at a pause the model judged final), by the model after the prompt, or by the fallback.

    python bench/turn_stop_sweep.py                        # stops 0.1,0.12,0.15,0.2 -> bench/results/turn_stop_sweep_cpu/
    python bench/turn_stop_sweep.py --stops 0.2 --turn engine
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

FRAME_MS = 40  # the phone line's input frames (phone.input_frame_ms of the GPU runs)
LEAD_S = 0.3  # the caller's quiet before each prompt
TAIL_S = 2.0  # and after it: longer than any fallback asked here


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p10": None, "p50": None, "p90": None, "p99": None}
    p = np.percentile(np.asarray(values), [10, 50, 90, 99])
    return {k: round(float(v), 1) for k, v in zip(("p10", "p50", "p90", "p99"), p, strict=True)}


class Judge:
    """smart-turn's probability for a segment: pipecat's ONNX analyzer, or the engine's torch model."""

    def __init__(self, kind: str, fallback_s: float):
        from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams

        from agent.shared_models import SharedSmartTurnAnalyzerV3

        self.analyzer = SharedSmartTurnAnalyzerV3(params=SmartTurnParams(stop_secs=fallback_s))
        self.analyzer.set_sample_rate(16000)
        self.torch = None
        if kind == "engine":
            from agent.smart_turn.batcher import TurnBatcher
            from agent.smart_turn.onnx_weights import load_model

            self.torch = TurnBatcher(model=load_model(None), device="cpu")
            self.analyzer._predict_endpoint = self._predict_torch  # the same segment, the engine's model

    def _predict_torch(self, audio: np.ndarray) -> dict:
        p = float(self.torch.score([audio])[0])
        return {"prediction": int(p > 0.5), "probability": p}


async def replay(ulaw: bytes, stop_s: float, judge: Judge, config) -> dict:
    """One prompt through the VAD and the turn analyzer; times in seconds from the caller's last audible frame."""
    from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
    from pipecat.audio.vad.vad_analyzer import VADState

    from agent.capacity.phone_caller import FRAME, audible
    from agent.pipeline import make_vad
    from transports.phone.codec import PolyphaseUpsampler

    ulaw = ulaw + b"\xff" * (-len(ulaw) % FRAME)
    last = max(i for i in range(0, len(ulaw) // FRAME) if audible(ulaw[i * FRAME:(i + 1) * FRAME]))
    eos = LEAD_S + last * 0.02
    signal = b"\xff" * int(8000 * LEAD_S) + ulaw + b"\xff" * int(8000 * TAIL_S)
    vad = make_vad(config)
    vad.set_sample_rate(16000)
    turn = judge.analyzer
    turn.clear()
    upsample = PolyphaseUpsampler(2)
    step = 8 * FRAME_MS
    speaking, stops, asked = False, 0, []
    for k in range(0, len(signal) - step + 1, step):
        at = (k + step) / 8000.0  # the frame has fully arrived
        pcm = upsample.process(audioop.ulaw2lin(signal[k:k + step], 2))
        state = await vad.analyze_audio(pcm)
        was = speaking
        if state == VADState.SPEAKING:
            speaking = True
        elif state == VADState.QUIET:
            speaking = False
        if turn.append_audio(pcm, speaking) == EndOfTurnState.COMPLETE:
            return {"end_s": at - eos, "by": "fallback", "stops": stops, "probs": asked}
        if was and not speaking:  # the VAD's stop: the stop strategy asks the model
            stops += 1
            verdict, metrics = await turn.analyze_end_of_turn()
            asked.append(round(float(getattr(metrics, "probability", float("nan"))), 3))
            if verdict == EndOfTurnState.COMPLETE:
                return {"end_s": at - eos, "by": "early" if at < eos else "model", "stops": stops, "probs": asked}
    return {"end_s": None, "by": "never", "stops": stops, "probs": asked}


async def sweep(args) -> dict:
    from agent.capacity.corpus import read_ulaw_pack, recorded_prompts, write_ulaw_pack
    from agent.config import Config

    if not args.pack.exists():
        write_ulaw_pack(args.pack, recorded_prompts())
    prompts = read_ulaw_pack(args.pack)[: args.limit or None]
    judge = Judge(args.turn, args.fallback)
    out: dict = {"stops": {}}
    for stop in [float(s) for s in args.stops.split(",")]:
        config = Config()
        config.vad.stop_secs = stop
        config.vad.batch_windows = False  # one caller here: the plain analyzer, the same scores
        turns = []
        for name, ulaw in prompts:
            row = await replay(ulaw, stop, judge, config)
            turns.append({"name": name, **row})
        ends = [t["end_s"] * 1000.0 for t in turns if t["end_s"] is not None and t["by"] != "early"]
        by = {k: sum(t["by"] == k for t in turns) for k in ("model", "fallback", "early", "never")}
        summary = {"prompts": len(turns), "ends_ms": percentiles(ends), "by": by,
                   "model_ends_ms": percentiles([t["end_s"] * 1000.0 for t in turns if t["by"] == "model"]),
                   "early_prompts": [t["name"] for t in turns if t["by"] == "early"]}
        out["stops"][str(stop)] = {"summary": summary, "turns": turns}
        e, m = summary["ends_ms"], summary["model_ends_ms"]
        print(f"stop {stop:.2f} s: last audible -> turn end p10/p50/p90/p99 {e['p10']}/{e['p50']}/{e['p90']}/"
              f"{e['p99']} ms (model's ends p50 {m['p50']}); ended by model {by['model']}, fallback "
              f"{by['fallback']}, cut inside the prompt {by['early']}, never {by['never']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", type=Path, default=ROOT / ".cascade/prompts.npz")
    ap.add_argument("--stops", default="0.1,0.12,0.15,0.2", help="VAD stop windows (s), comma-separated")
    ap.add_argument("--turn", choices=("onnx", "engine"), default="onnx", help="smart-turn's ONNX file or the "
                    "engine's torch model")
    ap.add_argument("--fallback", type=float, default=0.8, help="vad.turn_fallback_secs")
    ap.add_argument("--limit", type=int, default=0, help="the first N prompts only (0: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/turn_stop_sweep_cpu")
    args = ap.parse_args()
    from bench.common import write_result

    result = asyncio.run(sweep(args))
    path = write_result(f"turn_stop_sweep_{args.turn}", {"frame_ms": FRAME_MS, "fallback_s": args.fallback,
                                                           "turn_model": args.turn, **result}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
