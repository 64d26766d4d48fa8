"""``cadence transcribe-server`` (OpenAI-compatible file transcription) and ``cadence transcribe-ray``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.cli import add_config_args
from agent.cli_ray import add_ray_arguments
from agent.commands import UserError, effective_config, friendly


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("whisper", "parakeet"), help="ASR engine (default: asr.engine)")
    p.add_argument("--model", help="model dir or checkpoint (default: asr.model; empty: embedded Whisper tiny.en)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: asr.device)")
    p.add_argument("--max-batch", type=int, default=0, help="windows per engine call (default: the engine's)")
    p.add_argument("--parakeet-backend", choices=("auto", "fast", "general"), default="auto",
                   help="parakeet: fast (profiled, graphed GPU encoder), general (ParakeetEngine); "
                        "auto: fast on CUDA, general on the CPU")
    p.add_argument("--profiles", default="", help="parakeet fast: encoder profiles name=BATCHxFRAMES,... "
                                                  "(default: ~10/20/30 s windows at the max batch)")


def _engine_spec(args: argparse.Namespace, config: Any) -> Any:
    from agent.models import resolve_engine_spec
    from asr.offline.window_engine import EngineSpec

    asr = config.asr
    return resolve_engine_spec(EngineSpec(
        # the server runs Whisper or Parakeet: the live agent's Moonshine (asr.engine) maps to Whisper here
        engine=args.engine or (asr.engine if asr.engine in ("whisper", "parakeet") else "whisper"),
        model=args.model if args.model is not None else (asr.model if asr.engine in ("whisper", "parakeet") else ""),
        device=args.device or asr.device, compute_type=asr.compute_type, dtype=asr.dtype,
        encoder_backend=asr.encoder_backend, max_batch=args.max_batch,
        parakeet_backend=args.parakeet_backend, profiles=args.profiles,
    ))


def _load_engine(spec: Any) -> Any:
    from asr.offline.engine_factory import make_engine

    try:
        return make_engine(spec)
    except (ImportError, FileNotFoundError, ValueError) as exc:
        raise UserError(f"cannot load the {spec.engine} engine: {exc}") from None


def cmd_transcribe_server(args: argparse.Namespace) -> int:
    config = effective_config(args)
    spec = _engine_spec(args, config)
    from agent.runtime import run
    from asr.offline.host_pool import default_workers, serve_workers
    from asr.offline.server import ServerOptions, serve
    from asr.offline.shm_audio import available
    from asr.offline.transcriber import OfflineTranscriber

    workers = default_workers(spec.device) if args.workers is None else args.workers
    if workers < 0:
        raise UserError(f"--workers must be 0 (one process) or more, not {workers}")
    if workers and not available():
        raise UserError("--workers needs shared memory as files (/dev/shm, Linux); use --workers 0")
    engine = _load_engine(spec)
    options = ServerOptions(max_upload_mb=args.max_upload_mb, max_audio_s=args.max_audio_s,
                            max_inflight=args.max_inflight, max_audio_held_s=args.max_audio_held_s,
                            api_key=config.server.api_key)

    def ready(url: str) -> None:
        host = f"{workers} host worker processes" if workers else "one process"
        print(f"Cadence transcription server ready: {url}/v1 (model {engine.name}; "
              f"POST {url}/v1/audio/transcriptions; {host})", flush=True)

    transcriber = OfflineTranscriber(engine, spec.max_batch or None)
    host = args.host or config.server.host
    if workers:
        main = serve_workers(transcriber, host, args.port, workers, options, ready, balance=args.balance)
    else:
        main = serve(transcriber, host, args.port, options, ready)
    run(main, use_uvloop=config.runtime.uvloop)
    return 0


def cmd_transcribe_ray(args: argparse.Namespace) -> int:
    spec = _engine_spec(args, effective_config(args))
    from agent.cli_ray import RayCorpusError, transcribe_corpora

    try:
        return transcribe_corpora(spec, [args.dir], args.out, args, args.format, args.language)
    except RayCorpusError as exc:
        raise UserError(str(exc)) from None


def register(sub: Any) -> None:
    p = sub.add_parser("transcribe-server", help="OpenAI-compatible file transcription server",
                       description="Serve POST /v1/audio/transcriptions (OpenAI's API: json, text, srt, vtt, "
                                   "verbose_json) on the configured ASR engine; hour-long files in one request.")
    add_config_args(p)
    _add_engine_args(p)
    p.add_argument("--host", help="listen address (default: server.host)")
    p.add_argument("--port", type=int, default=8000, help="listen port, 0 for any free port (default: 8000)")
    p.add_argument("--max-upload-mb", type=float, default=1024.0, help="largest upload accepted (default: 1024)")
    p.add_argument("--max-audio-s", type=float, default=4 * 3600.0, help="longest audio accepted (default: 4 h)")
    p.add_argument("--max-inflight", type=int, default=64, help="requests held at once; more get 429")
    p.add_argument("--max-audio-held-s", type=float, default=8 * 3600.0,
                   help="decoded audio held by all requests together; later ones wait (default: 8 h, ~1.8 GB)")
    p.add_argument("--workers", type=int, default=None,
                   help="host worker processes (HTTP, upload, decode, planning, stitching) feeding this process's "
                        "engine through shared memory; 0: everything in one process (default: min(cores - 1, 8) "
                        "on CUDA, 0 on the CPU)")
    p.add_argument("--balance", choices=("least_loaded", "kernel"), default="least_loaded",
                   help="with --workers: least_loaded = this process hands each connection to the worker with the "
                        "fewest open connections; kernel = SO_REUSEPORT, the kernel's hash picks (default: least_loaded)")
    p.set_defaults(func=friendly(cmd_transcribe_server))

    p = sub.add_parser("transcribe-ray", help="transcribe a directory of audio as a Ray Data job",
                       description="Spread every audio file under DIR over a Ray cluster (local when no "
                                   "--address); write one transcript per file under --out.")
    add_config_args(p)
    _add_engine_args(p)
    p.add_argument("dir", type=Path, help="directory of audio files (searched recursively)")
    p.add_argument("--out", "-o", type=Path, required=True, help="output directory (mirrors DIR)")
    p.add_argument("--format", default="json", choices=("json", "text", "srt", "vtt", "verbose_json"))
    p.add_argument("--language", default=None, help="language code (default: the engine's)")
    add_ray_arguments(p)
    p.set_defaults(func=friendly(cmd_transcribe_ray))
