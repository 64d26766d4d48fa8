"""CPU per smart-turn v3 inference (the turn analyzer every caller runs at each VAD stop), per BLAS setting.

Each arm runs in a fresh interpreter with ``OPENBLAS_NUM_THREADS`` set as given (``default``: unset, numpy's
OpenBLAS uses a thread per core), loads the agent's shared smart-turn analyzer and times ``--n`` predictions
on 8 s of audio: wall ms and process CPU ms per inference (CPU above wall is other threads spinning).

    python bench/smart_turn_cpu.py                    # default vs 1, writes bench/results/smart_turn_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ARM = r"""
import json, time, numpy as np
N = 0
from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from agent.shared_models import SharedSmartTurnAnalyzerV3
a = SharedSmartTurnAnalyzerV3(params=SmartTurnParams(stop_secs=0.8))
a.set_sample_rate(16000)
x = np.random.default_rng(0).normal(0, 0.05, 16000 * 8).astype(np.float32)
a._predict_endpoint(x)
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(N):
    a._predict_endpoint(x)
print(json.dumps({"wall_ms": (time.perf_counter() - t0) / N * 1e3, "cpu_ms": (time.process_time() - c0) / N * 1e3}))
"""


def arm(threads: str, n: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OPENBLAS_NUM_THREADS", None)
    code = ARM.replace("N = 0", f"N = {n}")
    if threads == "default":  # numpy imported before agent: the variable agent/__init__.py sets comes too late
        code = "import numpy\n" + code
    else:
        env["OPENBLAS_NUM_THREADS"] = threads
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return {k: round(v, 1) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--arms", default="default,1,default,1")
    ap.add_argument("--out", default=str(ROOT / "bench/results/smart_turn_cpu.json"))
    args = ap.parse_args()
    rows = []
    for threads in args.arms.split(","):
        row = {"openblas_threads": threads, **arm(threads, args.n)}
        print(row, flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": commit,
           "machine": f"{platform.machine()} cores={len(os.sched_getaffinity(0))}", "load": os.getloadavg(),
           "audio_s": 8, "inferences_per_arm": args.n, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
