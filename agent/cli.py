"""``cadence``: the command line.

Subcommands come from small modules, each exposing ``register(subparsers)``; heavy imports
happen inside the handlers, so ``cadence --help`` is instant.
"""

from __future__ import annotations

import argparse
import sys

from loguru import logger

from agent.optional import import_optional

# Modules that add subcommands. A missing optional module is skipped silently.
COMMAND_MODULES = (
    "agent.commands",
    "agent.ops_commands",
    "agent.cli_transcribe",
    "agent.cli_transcribe_server",
)


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """The flags every command that builds a pipeline understands."""
    parser.add_argument("--config", "-c", help="TOML config file (default: $CADENCE_CONFIG or built-in defaults)")
    parser.add_argument("--set", "-s", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set llm.max_tokens=48")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING, ERROR (default: server.log_level)")


def setup_logging(level: str) -> None:
    logger.remove()
    logger.add(sys.stderr, level=level.upper(),
               format="<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {name}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cadence",
        description="Cadence: a low-latency voice agent (ASR -> LLM -> TTS) on pipecat.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = import_optional(name)
        if module is None:
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
