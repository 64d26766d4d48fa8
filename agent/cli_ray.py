"""The Ray options and driver shared by ``cadence transcribe-ray DIR`` and ``cadence transcribe --ray DIR``.

Only argparse at import time: Ray and the engines are imported when a job runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asr.offline.window_engine import EngineSpec


class RayCorpusError(Exception):
    """A corpus job that cannot start (Ray missing, a directory with no audio): one clear line."""


def add_ray_arguments(parser: Any, address_flag: str = "--address") -> None:
    """The cluster and replica options (``parser`` may be an argument group); ``args.ray_address`` etc."""
    parser.add_argument(address_flag, dest="ray_address", default=None,
                        help="Ray cluster address (default: start a local one)")
    parser.add_argument("--workers", type=int, default=1, help="engine replicas (one per GPU on GPU clusters)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per replica (default 0: CPU)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per replica")
    parser.add_argument("--files-per-batch", type=int, default=8, help="files each replica takes at once")


def transcribe_corpora(spec: EngineSpec, roots: Sequence[Path], out_dir: Path, args: argparse.Namespace,
                       response_format: str, language: str | None = None) -> int:
    """Every audio file under ``roots`` through one Ray Data job each; prints a summary; 1 if any file failed."""
    from asr.offline.ray_job import RayJobOptions, find_audio_files, run_ray_job

    try:
        import ray  # noqa: F401
    except ImportError:
        raise RayCorpusError("a corpus on Ray needs Ray: pip install 'cadence[ray]'") from None
    corpora = [(Path(root), find_audio_files(Path(root))) for root in roots]
    for root, files in corpora:
        if not files:
            raise RayCorpusError(f"{root}: no audio files found")
    opts = RayJobOptions(address=args.ray_address, workers=args.workers, gpus_per_worker=args.gpus_per_worker,
                         cpus_per_worker=args.cpus_per_worker, files_per_batch=args.files_per_batch,
                         response_format=response_format, language=language)
    failed = False
    for root, files in corpora:
        summary = run_ray_job(spec, files, root, out_dir, opts)
        print(summary.describe())
        failed = failed or bool(summary.failed)
    return 1 if failed else 0
