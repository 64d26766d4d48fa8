"""First audio at the caller, split by whether smart-turn judges the spoken prompt finished.

`cadence capacity` plays Debian's Asterisk prompts, and about one in ten of them is a fragment ("You are currently
caller number") that smart-turn judges unfinished (bench/turn_prompts.py). A turn ending on such a prompt waits the
silence fallback (`vad.turn_fallback_secs`, 0.8 s) whatever the machine does, so those turns set the first-audio
p95/p99 at every load. This reads a capacity run's caller records (`records.tar`: the prompt each caller spoke and
when its audio came back), scores each turn as `cadence capacity` does (`phone_turns`), and gives the percentiles
over all turns (the run's own figures, as a check), over the prompts judged finished, and over the rest.

    python bench/first_audio_by_prompt.py bench/results/run71_cascade_h100_cost_plan_cold
    python bench/first_audio_by_prompt.py RUN --column onnx_0.2   # runs with vad.turn_model = "onnx"

The judgement is turn_prompts.json's (smart-turn on the CPU with 0.2 s of quiet after each prompt, the moment the
VAD stops): the GPU's own verdicts may differ on a prompt near the threshold.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.capacity.phone_caller import PhoneCallRecord  # noqa: E402
from agent.capacity.phone_ramp import phone_turns  # noqa: E402

JUDGED = ROOT / "bench/results/turn_prompts_cpu/turn_prompts.json"
THRESHOLD = 0.5  # pipecat's: a probability at or above it ends the turn


def judged_finished(path: Path, column: str) -> dict[str, bool]:
    """Prompt name -> whether smart-turn judged it finished (``column``: e.g. torch_0.2, the engine model)."""
    prompts = json.loads(path.read_text())["prompts"]
    return {p["name"]: p[column] >= THRESHOLD for p in prompts}


def level_records(run: Path) -> dict[int, dict]:
    """Each level's ``{"hold": [start, end], "callers": [...]}`` from the run's records.tar (or loose files)."""
    out: dict[int, dict] = {}
    tar_path = run / "records.tar"
    if tar_path.exists():
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                m = re.search(r"records-(\d+)\.json\.gz$", member.name)
                if m and (f := tar.extractfile(member)) is not None:
                    out[int(m.group(1))] = json.loads(gzip.decompress(f.read()))
    for path in run.glob("records-*.json.gz"):
        out[int(re.search(r"records-(\d+)", path.name).group(1))] = json.loads(gzip.decompress(path.read_bytes()))
    return dict(sorted(out.items()))


def turns_by_prompt(level: dict) -> list[tuple[str, float | None]]:
    """(prompt, first audio ms or None) of every turn whose end of speech falls in the level's hold."""
    start, end = level["hold"]
    out = []
    for raw in level["callers"]:
        record = PhoneCallRecord(**{k: v for k, v in raw.items() if k in PhoneCallRecord.__dataclass_fields__})
        record.chunks = [tuple(c) for c in record.chunks]
        record.marks = [tuple(m) for m in record.marks]
        for turn in phone_turns(record):
            if start <= turn.eos <= end:
                out.append((turn.prompt or "?", turn.first_audio_ms))
    return out


def pct(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p95, p99 = (float(np.percentile(values, q)) for q in (50, 95, 99))
    return f"{p50:,.0f} / {p95:,.0f} / {p99:,.0f} ms (n {len(values)})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="capacity run folders (records.tar, capacity.json)")
    p.add_argument("--judged", type=Path, default=JUDGED, help="bench/turn_prompts.py's JSON")
    p.add_argument("--column", default="torch_0.2", help="its judgement column: torch_0.2 (engine) or onnx_0.2")
    args = p.parse_args()
    finished = judged_finished(args.judged, args.column)
    for run in args.runs:
        capacity = json.loads((run / "capacity.json").read_text()) if (run / "capacity.json").exists() else {}
        reported = {lv["concurrency"]: lv for lv in capacity.get("levels", [])}
        print(f"{run.name} (commit {str(capacity.get('commit', '?'))[:8]}), first audio p50 / p95 / p99 at the caller:")
        for n, level in level_records(run).items():
            turns = [(name, ms) for name, ms in turns_by_prompt(level) if ms is not None]
            all_ms = [ms for _, ms in turns]
            done = [ms for name, ms in turns if finished.get(name, True)]
            rest = [ms for name, ms in turns if not finished.get(name, True)]
            check = reported.get(n, {}).get("first_audio_p50_ms")
            print(f"  {n:3d} callers: all {pct(all_ms)}"
                  f"{f' [capacity.json p50 {check:,.0f}]' if check is not None else ''}")
            print(f"       prompts judged finished {pct(done)}; judged unfinished {pct(rest)}")


if __name__ == "__main__":
    main()
