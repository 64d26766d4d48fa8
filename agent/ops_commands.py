"""Operations subcommands: ``cadence stats`` (live per-stage tails) and ``cadence capacity``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from agent.cli import add_config_args
from agent.commands import UserError, effective_config, friendly


def cmd_stats(args: argparse.Namespace) -> int:
    import httpx

    from agent.metrics.scrape import format_table, parse_metrics

    config = effective_config(args)
    url = (args.url or f"http://{config.server.host}:{config.server.port}").rstrip("/") + "/metrics"
    while True:
        try:
            r = httpx.get(url, timeout=5.0)
            r.raise_for_status()
        except httpx.HTTPError as exc:
            raise UserError(f"cannot read {url}: {exc} (is `cadence serve` running there?)") from None
        print(format_table(parse_metrics(r.text)), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)
        print()


def cmd_capacity(args: argparse.Namespace) -> int:
    from agent.runtime import run

    config = effective_config(args)
    try:
        levels = tuple(sorted({int(x) for x in args.levels.split(",") if x.strip()}))
    except ValueError:
        raise UserError(f"--levels must be comma-separated integers, got {args.levels!r}") from None
    if not levels or levels[0] < 1:
        raise UserError("--levels needs at least one level >= 1")
    out_dir: Path = args.out_dir
    meta: dict[str, Any] = {"command": "cadence " + " ".join(sys.argv[1:]), "commit": git_commit(),
                            "transport": args.transport, "budgets": vars(config.budgets)}
    if args.transport == "phone":
        from agent.capacity.phone_ramp import PhoneRampOptions

        url = (args.url or f"http://{config.server.host}:{config.server.port}").rstrip("/")
        popts = PhoneRampOptions(url=url, ramp=levels, warmup_s=args.warmup, hold_s=args.hold,
                                 connect_s=args.connect_over, pause_jitter_s=args.pause_jitter,
                                 max_wait_s=args.max_wait, refine=not args.no_refine,
                                 all_levels=args.all_levels,
                                 metrics_url=(args.metrics_url or "").rstrip("/"),
                                 records_dir=str(out_dir) if args.records else "")
        meta["options"] = vars(popts) | {"ramp": list(levels)}
        title = f"Cadence capacity over the phone line ({url})"

        def save(cap_so_far: int, done: list) -> None:  # after every level: a cut-short run keeps its levels
            from agent.capacity.report import plot, write_json

            write_json(out_dir / "capacity.json", cap_so_far, done, meta | {"complete": False})
            try:  # a drawing problem must not end the measurement
                plot(out_dir / "capacity.png", cap_so_far, done, config.budgets.output_rt_ratio_min, title)
            except Exception as exc:
                print(f"capacity: the plot failed ({exc!r}); the JSON has every level", file=sys.stderr)

        cap, result = run(_phone_capacity(config, popts, args.prompts, meta, save), use_uvloop=config.runtime.uvloop)
        meta["complete"] = True
    else:
        from agent.capacity.ramp import RampOptions

        opts = RampOptions(ramp=levels, warmup_s=args.warmup, hold_s=args.hold, max_wait_s=args.max_wait,
                           refine=not args.no_refine)
        cap, result = run(_capacity(config, opts, out_dir), use_uvloop=config.runtime.uvloop)
        meta["options"] = vars(opts) | {"ramp": list(levels)}
        title = f"Cadence capacity ({config.asr.engine} / {config.tts.engine} / LLM {config.llm.base_url or 'embedded'})"
    from agent.capacity.report import plot, write_cap, write_json

    write_json(out_dir / "capacity.json", cap, result, meta)
    plot(out_dir / "capacity.png", cap, result, config.budgets.output_rt_ratio_min, title)
    print(f"results: {out_dir / 'capacity.json'}, curve: {out_dir / 'capacity.png'}")
    if cap < 1:
        print("cadence: even one caller is out of budget (see the reasons above); no cap written. "
              "Loosen [budgets] or use a faster machine.")
        return 1
    target = args.write_config or (Path(args.config) if args.config else Path("cadence-capacity.toml"))
    write_cap(target, cap)
    print(f"capacity: {cap} concurrent callers; wrote [admission] max_sessions = {cap} to {target}")
    return 0


def git_commit() -> str:
    """The checkout's commit (``$CADENCE_COMMIT`` where the tree travelled without ``.git``)."""
    import os
    import subprocess

    if os.environ.get("CADENCE_COMMIT"):
        return os.environ["CADENCE_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parents[1])
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


async def _phone_capacity(config: Any, opts: Any, prompts: Path | None, meta: dict,
                          on_level: Any = None) -> tuple[int, list]:
    """Callers over the phone WebSocket of a running server (``--url``); the server is not started here."""
    import httpx

    from agent.capacity.corpus import phone_prompts
    from agent.capacity.phone_ramp import find_phone_capacity

    try:
        async with httpx.AsyncClient(timeout=10.0) as http:
            health = (await http.get(f"{opts.scrape_url}/health")).json()
            ready = (await http.get(f"{opts.scrape_url}/ready")).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise UserError(f"no Cadence server at {opts.scrape_url} ({exc}); start `cadence serve` first") from None
    if ready.get("capacity", 0) < max(opts.ramp):
        raise UserError(f"the server admits {ready.get('capacity')} callers, fewer than the largest level "
                        f"{max(opts.ramp)}: start it with --set admission.max_sessions={max(opts.ramp)}")
    corpus = phone_prompts(prompts, Path.home() / ".cache" / "cadence" / "utterances")
    meta["server"] = {"url": opts.url, "metrics_url": opts.scrape_url, "health": health, "ready": ready}
    meta["prompts"] = {"count": len(corpus), "source": str(prompts) if prompts else "asterisk + espeak-ng"}
    return await find_phone_capacity(corpus, opts, config.budgets, on_level)


async def _capacity(config: Any, opts: Any, out_dir: Path) -> tuple[int, list]:
    from agent import metrics_http
    from agent.capacity.corpus import load_corpus
    from agent.capacity.ramp import find_capacity
    from agent.serve import CadenceServer

    # The judged window must hold a whole level, and every steady-state sample counts (a level
    # has few turns per caller: the p99 of a handful is their worst).
    config.budgets.window_s = max(config.budgets.window_s, opts.warmup_s + opts.hold_s + opts.max_wait_s + 30.0)
    config.budgets.min_samples = 1
    server = CadenceServer(config)
    bundle = metrics_http.install(server)
    corpus = load_corpus(Path.home() / ".cache" / "cadence" / "utterances", config.audio.in_sample_rate)
    try:
        await server.start_engines()
        server.freeze_heap()
        bundle.runtime.start()
        return await find_capacity(server, bundle, corpus, opts)
    finally:
        await bundle.runtime.stop()
        if server.llm_server is not None:
            server.llm_server.stop()


def register(sub: Any) -> None:
    p = sub.add_parser("stats", help="per-stage p50/p95/p99/max of a running server",
                       description="Read /metrics of a running Cadence server and print each stage's "
                                   "window percentiles, its budget and its breaches.")
    add_config_args(p)
    p.add_argument("--url", help="server base URL (default: http://server.host:server.port)")
    p.add_argument("--watch", type=float, default=0.0, metavar="SECONDS", help="refresh every SECONDS")
    p.set_defaults(func=friendly(cmd_stats))

    p = sub.add_parser("capacity", help="measure how many callers fit inside the budgets; write the cap",
                       description="Ramp synthetic callers (1, 2, 4, ...) talking and listening in real time "
                                   "through the real pipeline; find the largest concurrency whose p99 "
                                   "delivery stays >= budgets.output_rt_ratio_min with every stage inside "
                                   "its budget; write it as [admission] max_sessions and draw the curve.")
    add_config_args(p)
    p.add_argument("--levels", default="1,2,4,8,16,32,64", help="concurrency ramp (default: 1,2,4,...,64)")
    p.add_argument("--hold", type=float, default=45.0, help="seconds each level is judged (default 45)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds to reach steady state (default 10)")
    p.add_argument("--connect-over", type=float, default=0.0, metavar="SECONDS",
                   help="phone transport: callers connect at random times over SECONDS (default 0.6 x --warmup); "
                        "about one turn cycle (~11 s) spreads their turns evenly; keep it under --warmup")
    p.add_argument("--pause-jitter", type=float, default=0.0, metavar="SECONDS",
                   help="phone transport: each caller waits 0.6 s plus a uniform draw of up to SECONDS after a reply "
                        "before its next prompt (default 0: always 0.6 s, which keeps callers' turns in waves)")
    p.add_argument("--max-wait", type=float, default=15.0,
                   help="a reply that has not begun this long after the caller's end of speech is unanswered (a "
                        "reply that began is heard out)")
    p.add_argument("--no-refine", action="store_true", help="do not bisect between the knee and the failure")
    p.add_argument("--out-dir", type=Path, default=Path("capacity-results"), help="where the JSON and PNG go")
    p.add_argument("--transport", choices=("inprocess", "phone"), default="inprocess",
                   help="inprocess: callers inside this process on its own engines (default); phone: callers "
                        "over the phone WebSocket of a running `cadence serve` (--url), 8 kHz mu-law both ways")
    p.add_argument("--url", help="phone transport: the server's base URL (default: http://server.host:server.port)")
    p.add_argument("--metrics-url", help="phone transport: where /metrics, /metrics/reset, /health and /ready are "
                                         "read (default: --url); for `cadence serve --workers N`: the parent's "
                                         "summing listener, server.metrics_listen or the main port + 1")
    p.add_argument("--prompts", type=Path, help="phone transport: a prompt pack (.npz of 8 kHz mu-law; default: "
                                                "the Debian Asterisk prompts and espeak-ng questions)")
    p.add_argument("--all-levels", action="store_true", help="run every level of --levels, past failures too")
    p.add_argument("--records", action="store_true",
                   help="phone transport: write each level's caller timelines (every chunk, mark, clear and prompt "
                        "time) to OUT_DIR/records-N.json.gz, to read a failed level turn by turn")
    p.add_argument("--write-config", type=Path,
                   help="TOML file to write the cap into (default: --config, else ./cadence-capacity.toml)")
    p.set_defaults(func=friendly(cmd_capacity))
