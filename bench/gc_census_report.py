"""The table ``bench/session_gc_heap.sh`` prints: per arm and process, the GC heap's census (bench/gc_census/), the
full-collection pauses the session process logged during the calls, and the level's latency tails.

    python3 bench/gc_census_report.py OUT_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROLES = (("engine_server", "engine"), ("transformers", "llm"), ("cli.py serve", "session"),
         ("cli.py capacity", "callers"))


def role(argv: str) -> str:
    return next((name for key, name in ROLES if key in argv), "other")


def census(path: Path) -> dict:
    """The process's samples: its role, the most objects tracked, frozen, the idle full collection's ms."""
    heads = [line for line in path.read_text().splitlines() if line.startswith("--- ")]
    if not heads:
        return {}
    frozen = [h for h in heads if not re.search(r"frozen=0 ", h)] or heads  # from the freeze on (if any)
    tracked = [int(re.search(r"tracked=(\d+)", h).group(1)) for h in frozen]
    idle = [float(m.group(1)) for h in heads if (m := re.search(r"idle_full_collection_ms=([\d.]+)", h))]
    late = path.with_name(path.name.replace("census-", "modules-"))
    garbage = path.with_name(path.name.replace("census-", "garbage-"))
    cycles = garbage.read_text().splitlines()[0] if garbage.exists() else "-"
    return {"role": role(heads[0]), "tracked_max": max(tracked), "tracked_last": tracked[-1],
            "frozen": int(re.search(r"frozen=(\d+)", heads[-1]).group(1)),
            "idle_ms": min(idle) if idle else None,
            "late_modules": int(late.read_text().split(" imported")[0].split(", ")[-1]) if late.exists() else None,
            "cycles": cycles}


def pauses_during_calls(log: str) -> list[int]:
    """Generation-2 pauses >= 20 ms the session process logged from its first call's start to the first hang-up
    (the collection that frees the ended calls comes after it)."""
    start = log.find("session phone-")
    end = re.search(r"session phone-\S+: ended", log)
    if start < 0:
        return []
    return [int(x) for x in re.findall(r"the longest (\d+) ms, generation 2", log[start:end.start() if end else None])]


def main(out: Path) -> None:
    print("| arm (commit) | process | objects a full collection walks, during the calls (max) / idle | frozen |"
          " one full collection when idle | modules imported after the freeze | the ended calls' cycles |")
    print("|---|---|---|---|---|---|---|")
    tails = []
    for arm in sorted(p for p in out.iterdir() if p.is_dir()):
        commit = (arm / "commit").read_text().strip() if (arm / "commit").exists() else "?"
        for path in sorted((arm / "census").glob("census-*.txt")):
            c = census(path)
            if not c or c["role"] in ("other", "callers"):
                continue
            idle = f"{c['idle_ms']:.1f} ms" if c["idle_ms"] is not None else "-"
            late = "-" if c["late_modules"] is None else str(c["late_modules"])
            print(f"| {arm.name} ({commit}) | {c['role']} | {c['tracked_max']:,} / {c['tracked_last']:,} | "
                  f"{c['frozen']:,} | {idle} | {late} | {c['cycles']} |")
        level = json.loads((arm / "capacity.json").read_text())["levels"][0]
        t = level["stage_tails"]
        pauses = pauses_during_calls((arm / "serve.log").read_text())
        tails.append(f"- {arm.name} ({commit}): {level['concurrency']} callers; generation-2 pauses >= 20 ms logged "
                     f"during the calls (to the first hang-up): {len(pauses)} {pauses}; p99 gc_pause {t.get('gc_pause', 0):.1f} ms, "
                     f"event_loop_lag {t['event_loop_lag']:.1f} ms, phone_input_lag {t['phone_input_lag']:.0f} ms; "
                     f"first audio p50/p99 {level['first_audio_p50_ms']:.0f}/{level['first_audio_p99_ms']:.0f} ms; "
                     f"answered once {level['answered_once']}/{level['turns']}")
    print()
    print("\n".join(tails))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
