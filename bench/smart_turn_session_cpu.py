"""The session process's CPU per smart-turn decision: pipecat's ONNX analyzer in the process vs the engine's model.

What a session worker pays at each turn end, measured as this process's CPU time (every thread) over ``--n``
decisions on recorded phone prompts (8 kHz, as phone callers arrive): ``onnx`` scores in this process
(``vad.turn_model = "onnx"``: segment, resample, features, the int8 model on one thread); ``engine`` sends the
segment to an engine process (``vad.turn_model = "engine"``, here on its CPU) and awaits the probability, so the
model's cost lands in that process, not this one. The engine's own CPU per decision is reported beside it.

    python bench/smart_turn_session_cpu.py --n 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as agent/__init__.py sets it, before numpy loads its BLAS
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.phone_prompts import pcm8k  # noqa: E402

PROMPTS = ["agent-pass", "conf-getpin", "pbx-invalid", "queue-thankyou", "vm-incorrect", "privacy-unident",
           "all-circuits-busy-now", "check-number-dial-again"]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def fill(analyzer, name: str) -> None:
    """One turn of a phone caller: 0.5 s of quiet, the prompt, 0.2 s of quiet, in 20 ms frames."""
    pcm = np.concatenate([np.zeros(4000, "<i2"), np.frombuffer(pcm8k(name), "<i2"), np.zeros(1600, "<i2")])
    for lo in range(0, len(pcm) - 159, 160):
        frame = pcm[lo: lo + 160]
        analyzer.append_audio(frame.tobytes(), bool(np.abs(frame).max() > 600))


async def arm(make, n: int) -> dict[str, float]:
    """CPU and wall per decision over ``n`` decisions (after two warm ones)."""
    from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams

    analyzer = make(SmartTurnParams(stop_secs=0.8))
    analyzer.set_sample_rate(8000)
    cpu = wall = 0.0
    for i in range(n + 2):
        fill(analyzer, PROMPTS[i % len(PROMPTS)])
        c0, w0 = time.process_time(), time.perf_counter()
        await analyzer.analyze_end_of_turn()
        if i >= 2:
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
        analyzer.clear()
    await analyzer.cleanup()
    return {"cpu_ms": round(cpu / n * 1e3, 2), "wall_ms": round(wall / n * 1e3, 2)}


def engine_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(args: argparse.Namespace) -> dict:
    from agent.shared_models import SharedSmartTurnAnalyzerV3
    from agent.smart_turn.remote import RemoteSmartTurnAnalyzer
    from testkit.engine_server import start_engine_server, stop_engine_server

    onnx = await arm(lambda p: SharedSmartTurnAnalyzerV3(params=p), args.n)
    with tempfile.TemporaryDirectory(prefix="cad-turn-bench-") as d:
        path = str(Path(d) / "engine.sock")
        proc = await asyncio.to_thread(start_engine_server, path, {"turn": {"device": "cpu", "max_batch": 8}})
        try:
            before = engine_cpu_s(proc.pid)
            engine = await arm(lambda p: RemoteSmartTurnAnalyzer(path, params=p), args.n)
            engine["engine_process_cpu_ms"] = round((engine_cpu_s(proc.pid) - before) / (args.n + 2) * 1e3, 1)
        finally:
            await asyncio.to_thread(stop_engine_server, proc)
    return {"onnx": onnx, "engine": engine}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "bench/results/smart_turn_session_cpu.json"))
    args = parser.parse_args()
    load = os.getloadavg()
    arms = asyncio.run(main(args))
    out = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": git("rev-parse", "--short", "HEAD"),
           "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "conditions": {"cores": len(os.sched_getaffinity(0)), "machine": platform.machine(), "loadavg_before": load,
                          "loadavg_after": os.getloadavg(), "decisions": args.n, "audio": "8 kHz recorded prompts",
                          "engine": "agent.engine_server on this machine's CPU (torch, one thread)"},
           **arms}
    print(f"session CPU per decision: onnx {arms['onnx']['cpu_ms']} ms (wall {arms['onnx']['wall_ms']} ms); engine "
          f"{arms['engine']['cpu_ms']} ms (wall {arms['engine']['wall_ms']} ms; the engine process "
          f"{arms['engine']['engine_process_cpu_ms']} ms)")
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
