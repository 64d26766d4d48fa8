"""``cadence transcribe-ray DIR``: a corpus spread over a Ray cluster as a Ray Data job.

Each replica (a Ray actor, ``gpus_per_worker`` GPUs each) loads the same engine the server
uses and takes files ``files_per_batch`` at a time: it decodes them natively, batches their
windows together by length (``transcribe_corpus``) and returns the rendered transcripts;
the driver writes them under the output directory, mirroring the input tree. Files must be
readable at the same path on every node (a shared filesystem), as for any Ray job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asr.offline.window_engine import EngineSpec

AUDIO_SUFFIXES = {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".webm", ".mp4", ".aiff", ".aif"}
SUFFIX_BY_FORMAT = {"json": ".json", "verbose_json": ".json", "text": ".txt", "srt": ".srt", "vtt": ".vtt"}


@dataclass(frozen=True)
class RayJobOptions:
    address: str | None = None  # None: start a local cluster
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    files_per_batch: int = 8
    response_format: str = "json"
    language: str | None = None


@dataclass
class JobSummary:
    files: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    failed: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        rtfx = self.audio_s / self.wall_s if self.wall_s else 0.0
        lines = [f"transcribed {self.files - len(self.failed)}/{self.files} files, {self.audio_s:.1f} s of audio "
                 f"in {self.wall_s:.1f} s ({rtfx:.1f}x real time)"]
        lines += [f"failed: {path}: {why}" for path, why in self.failed]
        return "\n".join(lines)


def find_audio_files(root: Path) -> list[Path]:
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)


class TranscribeWorker:
    """One engine replica; Ray calls it with batches of ``{"path": [...]}``."""

    def __init__(self, spec: EngineSpec, response_format: str, language: str | None) -> None:
        from asr.offline.engine_factory import make_engine

        self.engine = make_engine(spec)
        self.response_format, self.language = response_format, language

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from asr.offline.decode import decode_file
        from asr.offline.formats import render
        from asr.offline.transcriber import transcribe_corpus
        from transports.audio_io import AudioFileError

        paths = [str(p) for p in batch["path"]]
        out: dict[str, list[Any]] = {"path": paths, "body": [""] * len(paths), "duration": [0.0] * len(paths),
                                     "error": [""] * len(paths)}
        audios, ok = [], []
        for i, path in enumerate(paths):
            try:
                audios.append(decode_file(path, self.engine.sample_rate))
                ok.append(i)
            except AudioFileError as exc:
                out["error"][i] = str(exc)
        for i, transcript in zip(ok, transcribe_corpus(self.engine, audios, self.language), strict=True):
            out["body"][i] = render(transcript, self.response_format)[0]
            out["duration"][i] = transcript.duration
        return out


def run_ray_job(spec: EngineSpec, files: list[Path], root: Path, out_dir: Path,
                opts: RayJobOptions | None = None) -> JobSummary:
    """Transcribe ``files`` on Ray; write ``out_dir/<path relative to root><suffix>``."""
    import ray

    opts = opts or RayJobOptions()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=opts.address, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR", configure_logging=True)
    t0 = time.perf_counter()
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        ds = ray.data.from_items([{"path": str(Path(f).resolve())} for f in files])
        ds = ds.map_batches(
            TranscribeWorker, batch_size=opts.files_per_batch, batch_format="numpy",
            fn_constructor_kwargs={"spec": spec, "response_format": opts.response_format,
                                   "language": opts.language},
            compute=ray.data.ActorPoolStrategy(size=opts.workers), num_gpus=opts.gpus_per_worker or None, num_cpus=opts.cpus_per_worker,
        )
        summary = JobSummary(files=len(files))
        root = Path(root).resolve()
        suffix = SUFFIX_BY_FORMAT[opts.response_format]
        for row in ds.iter_rows():
            path = Path(str(row["path"]))
            if row["error"]:
                summary.failed.append((str(path), str(row["error"])))
                continue
            rel = path.relative_to(root) if root.is_dir() and path.is_relative_to(root) else Path(path.name)
            target = Path(out_dir) / rel.with_suffix(suffix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(row["body"]))
            summary.outputs.append(target)
            summary.audio_s += float(row["duration"])
        summary.wall_s = time.perf_counter() - t0
        return summary
    finally:
        if started_here:
            ray.shutdown()
