"""Core subcommands: ``serve``, ``talk``, ``config show``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cli import add_config_args, setup_logging
from agent.config import Config, ConfigError, load_config


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def effective_config(args: argparse.Namespace, bot: Any = None) -> Config:
    """Defaults < config file < environment < the bot's settings < ``--set``."""
    try:
        config = load_config(args.config, args.set)
        if bot is not None:
            bot.configure(config)
            load_config_overrides(config, args.set)
            _ = bot.tool_choice  # a forced tool that does not exist fails here, not at the first call
    except (ConfigError, ValueError, TypeError) as exc:
        raise UserError(str(exc)) from None
    setup_logging(args.log_level or config.server.log_level)
    return config


def load_config_overrides(config: Config, overrides: list[str]) -> None:
    """Apply ``--set section.key=value`` items again (after a bot's settings)."""
    from agent.config import apply

    for item in overrides:
        dotted, _, value = item.partition("=")
        section, _, key = dotted.strip().partition(".")
        apply(config, section, key, value.strip(), "--set")


def bot_from_args(args: argparse.Namespace) -> Any:
    """The ``Bot`` of ``--bot FILE`` (or one handed over by ``Bot.run``), or None."""
    if getattr(args, "bot_object", None) is not None:
        return args.bot_object
    if not getattr(args, "bot", None):
        return None
    from agent.bot_loader import BotFileError, load_bot

    try:
        return load_bot(args.bot)
    except BotFileError as exc:
        raise UserError(str(exc)) from None


def friendly(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn expected failures (bad config, bad file, missing model) into one clear line."""

    def run(args: argparse.Namespace) -> int:
        from agent.gpu_memory import GPUPlanError
        from agent.llm_server import LLMServerError
        from agent.models import ModelNotFoundError
        from transports.audio_io import AudioFileError

        try:
            return handler(args)
        except (UserError, ConfigError, AudioFileError, LLMServerError, ModelNotFoundError, GPUPlanError) as exc:
            print(f"cadence: error: {exc}", file=sys.stderr)
            return 2

    return run


def cmd_config_show(args: argparse.Namespace) -> int:
    print(effective_config(args).to_toml())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import json
    import os

    from agent.workers import WORKER_ENV

    if args.worker_index is not None:  # a worker of `--workers N`: the parent's overrides come last
        args.set = [*args.set, *json.loads(os.environ.get(WORKER_ENV, "[]"))]
    bot = bot_from_args(args)
    config = effective_config(args, bot)
    if args.host:
        config.server.host = args.host
    if args.port is not None:
        config.server.port = args.port
    if args.workers is not None:
        config.server.workers = args.workers
    if config.server.workers < 0:
        raise UserError(f"server.workers must be >= 0 (0: one per core the engines and the LLM leave), "
                        f"got {config.server.workers}")
    if config.server.balance not in ("least_loaded", "kernel"):
        raise UserError(f"server.balance must be least_loaded or kernel, got {config.server.balance!r}")
    if not 0 <= config.server.worker_nice <= 19:
        raise UserError(f"server.worker_nice must be 0-19 (a nice increment), got {config.server.worker_nice}")
    if config.server.workers == 0 and args.worker_index is None:
        from loguru import logger

        from agent.workers import auto_workers, cores_available

        cores = cores_available()
        config.server.workers = auto_workers(config, cores)
        logger.info(f"server.workers = 0: {config.server.workers} session processes on {cores} cores")
    if config.server.tts_engines < 1:
        raise UserError(f"server.tts_engines must be >= 1, got {config.server.tts_engines}")
    from agent.runtime import apply_switch_interval, run

    if config.server.workers > 1 and args.worker_index is None:
        from agent.workers import WorkerPool

        bot_file = args.bot or getattr(args, "bot_file", None)
        if bot is not None and not bot_file:
            raise UserError("--workers N needs the bot as a file (cadence serve --bot FILE)")
        replay = ([*(["--config", args.config] if args.config else []),
                   *(["--bot", str(bot_file)] if bot_file else []),
                   *[a for item in args.set for a in ("--set", item)],
                   *(["--log-level", args.log_level] if args.log_level else [])])
        run(WorkerPool(config, replay).serve_forever(), use_uvloop=config.runtime.uvloop)
        return 0
    from agent.server_factory import make_server
    from transports.conn_dispatch import CONN_FD_ENV
    from transports.webrtc_peers import PEERS_ENV, PeerRouter

    apply_switch_interval(config.runtime.gil_switch_interval_ms, config.asr.engine, config.asr.device,
                          batcher_here=not config.server.engine_process)
    server = make_server(config)
    server.worker_index = args.worker_index
    if args.worker_index is not None and CONN_FD_ENV in os.environ:  # server.balance = least_loaded
        server.conn_fd = int(os.environ.pop(CONN_FD_ENV))
    if args.worker_index is not None and PEERS_ENV in os.environ:
        server.peer_router = PeerRouter.from_json(os.environ.pop(PEERS_ENV))
    server.bot = bot
    run(server.serve_forever(), use_uvloop=config.runtime.uvloop)
    return 0


def cmd_talk(args: argparse.Namespace) -> int:
    bot = bot_from_args(args)
    config = effective_config(args, bot)
    from agent.runtime import run
    from transports.audio_io import load_audio, write_wav

    audio = load_audio(args.input, config.audio.in_sample_rate)
    result = run(_talk_once(config, [audio], bot), use_uvloop=config.runtime.uvloop)
    from agent.talk import format_turn

    turn = result.turns[0]
    print(format_turn(turn))
    for call in result.tool_calls:
        print(f"tool call:  {call['tool']}({call['arguments']}) -> {call['result']!r}"
              + (f" error: {call['error']}" if call["error"] else ""))
    if args.out:
        write_wav(args.out, turn.reply_audio, result.out_sample_rate)
        print(f"reply audio: {args.out} ({len(turn.reply_audio) / 2 / result.out_sample_rate:.2f} s)")
    return 0 if turn.reply_audio else 1


async def _talk_once(config: Config, utterances: list[Any], bot: Any = None, max_wait_s: float = 15.0) -> Any:
    import asyncio

    from agent.llm_server import embedded_llama_server
    from agent.pipeline import Engines
    from agent.talk import talk

    server = None
    base_url, model = config.llm.base_url, config.llm.model
    try:
        if not base_url:
            server = embedded_llama_server(config.llm.threads, config.llm.context_size, config.llm.model,
                                           config.llm.server_start_timeout_s, nice=config.llm.nice)
            await server.astart()
            base_url, model = server.base_url, server.model_id
        engines = await asyncio.to_thread(Engines.load, config, base_url, model)
        engines.bot = bot
        if bot is not None and bot.tools:  # the prompt with the tool list, cached too
            await asyncio.to_thread(engines.warm_llm)
        return await talk(engines, utterances, max_wait_s=max_wait_s)
    finally:
        if server is not None:
            server.stop()


def serve_bot(bot: Any, argv: list[str]) -> int:
    """``cadence serve`` for a ``Bot`` object (``Bot.run``): the same flags, the bot instead of ``--bot``."""
    import __main__
    from agent.cli import build_parser

    args = build_parser().parse_args(["serve", *argv])
    args.bot_object = bot
    main_file = getattr(__main__, "__file__", None)
    args.bot_file = main_file if main_file and main_file.endswith(".py") else None
    return int(args.func(args) or 0)


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="start the voice agent with its WebRTC page",
                       description="Start the HTTP server with the WebRTC page; open the URL it prints and click Talk.")
    add_config_args(p)
    p.add_argument("--host", help="listen address (default: server.host)")
    p.add_argument("--port", type=int, help="listen port, 0 for any free port (default: server.port)")
    p.add_argument("--workers", type=int, help="server processes sharing the port (default: server.workers, 1; 0: one per "
                                               "core the engines and the LLM leave); "
                                               "see agent/workers.py")
    p.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)  # set by the --workers parent
    p.add_argument("--bot", type=Path, help="a bot file (agent.bot.Bot): its prompt, greeting and tools")
    p.set_defaults(func=friendly(cmd_serve))

    p = sub.add_parser("talk", help="one turn through the full cascade from an audio file",
                       description="Play an audio file (any format, any rate) as a caller's turn; print the "
                                   "transcript, the reply and per-stage latencies; write the spoken reply.")
    add_config_args(p)
    p.add_argument("input", type=Path, help="the caller's audio (WAV, MP3, FLAC, ...)")
    p.add_argument("--out", "-o", type=Path, help="write the bot's spoken reply here (WAV)")
    p.add_argument("--bot", type=Path, help="a bot file (agent.bot.Bot): its prompt, greeting and tools")
    p.set_defaults(func=friendly(cmd_talk))

    p = sub.add_parser("config", help="show the effective configuration")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION")
    show = csub.add_parser("show", help="print the effective config as TOML")
    add_config_args(show)
    show.set_defaults(func=friendly(cmd_config_show))
