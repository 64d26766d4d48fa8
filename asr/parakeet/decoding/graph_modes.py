"""Which loop-execution mode the GPU can run: one graph with WHILE nodes, graphs + host checks, or eager."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from asr.parakeet.decoding.cuda_api import MIN_BINDINGS_VERSION, MIN_DRIVER_VERSION

log = logging.getLogger(__name__)


class GraphMode(enum.Enum):
    """How a data-dependent GPU loop is driven."""

    CONDITIONAL = "conditional"  # one CUDA graph, loops are conditional WHILE nodes: no host round trips
    HOST_CHECKS = "graphs"  # each loop body is a CUDA graph; the host reads the loop flag between replays
    EAGER = "eager"  # plain PyTorch loop with host checks

    @classmethod
    def parse(cls, text: str) -> GraphMode | None:
        """``"auto"`` -> None; otherwise the mode by value or name."""
        text = text.strip().lower()
        if text in ("", "auto"):
            return None
        for mode in cls:
            if text in (mode.value, mode.name.lower()):
                return mode
        raise ValueError(f"unknown graph mode {text!r} (auto, conditional, graphs, eager)")


@dataclass(frozen=True)
class Capabilities:
    """What the runtime offers, gathered by :func:`probe` (or made up in tests)."""

    cuda: bool
    driver_version: int = 0  # e.g. 13000; 0 when unknown
    bindings_version: tuple[int, ...] = ()  # cuda-bindings; () when not installed


def best_mode(caps: Capabilities) -> GraphMode:
    """The fastest mode these capabilities support."""
    if not caps.cuda:
        return GraphMode.EAGER
    if caps.driver_version >= MIN_DRIVER_VERSION and caps.bindings_version >= MIN_BINDINGS_VERSION:
        return GraphMode.CONDITIONAL
    return GraphMode.HOST_CHECKS


def select_mode(requested: str | GraphMode, caps: Capabilities) -> GraphMode:
    """Resolve a requested mode against the capabilities, degrading (with a log line) when unsupported."""
    mode = requested if isinstance(requested, GraphMode) else GraphMode.parse(requested)
    best = best_mode(caps)
    if mode is None:
        return best
    order = [GraphMode.CONDITIONAL, GraphMode.HOST_CHECKS, GraphMode.EAGER]
    if order.index(mode) < order.index(best):
        log.warning("graph mode %s not supported here (%s); using %s", mode.value, caps, best.value)
        return best
    return mode


def fallbacks(mode: GraphMode) -> list[GraphMode]:
    """``mode`` then every slower mode, in the order to try them when building fails."""
    order = [GraphMode.CONDITIONAL, GraphMode.HOST_CHECKS, GraphMode.EAGER]
    return order[order.index(mode) :]


def probe(device: object = None) -> Capabilities:
    """Gather the capabilities of this process: CUDA, driver version, cuda-bindings version."""
    import torch

    if not torch.cuda.is_available() or (device is not None and torch.device(device).type != "cuda"):
        return Capabilities(cuda=False)
    try:
        from asr.parakeet.decoding import cuda_api

        return Capabilities(
            cuda=True, driver_version=cuda_api.driver_version(), bindings_version=cuda_api.bindings_version()
        )
    except (ImportError, RuntimeError) as exc:
        log.info("cuda-bindings unavailable (%s): no conditional graph nodes", exc)
        return Capabilities(cuda=True)
