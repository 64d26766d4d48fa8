"""``cadence asr convert|tiny`` and ``cadence transcribe``: Parakeet-TDT from the command line.

``cadence transcribe`` runs the offline pipeline of ``cadence transcribe-server`` and the Ray job
(``asr.offline``: one decoder, window plan, stitcher and ``Word``); ``--window-s`` and
``--overlap-s`` set its plan, in-process and with ``--ray`` alike. ``register(subparsers)`` only
adds parsers; torch and the engine are imported by the handlers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cli_ray import add_ray_arguments
from agent.commands import UserError, friendly


def register(subparsers: Any) -> None:
    asr = subparsers.add_parser("asr", help="Parakeet-TDT checkpoint tools (convert a .nemo, write a tiny model)")
    actions = asr.add_subparsers(dest="asr_command", metavar="ACTION")
    asr.set_defaults(func=lambda args: asr.print_help() or 2)

    convert = actions.add_parser("convert", help="convert a NeMo .nemo checkpoint to a transformers folder")
    convert.add_argument("nemo", help="MODEL.nemo")
    convert.add_argument("out_dir", help="folder to write (config.json, model.safetensors, tokenizer)")
    convert.set_defaults(func=_convert)

    tiny = actions.add_parser("tiny", help="write a tiny random Parakeet-TDT (for tests and plumbing demos)")
    tiny.add_argument("out", help="a folder, or a path ending in .nemo for a NeMo archive")
    tiny.add_argument("--vocab-size", type=int, default=256)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_tiny)

    t = subparsers.add_parser("transcribe", help="transcribe audio files of any length with Parakeet-TDT")
    t.add_argument("files", nargs="+", help="audio or video files (anything PyAV/FFmpeg decodes)")
    t.add_argument("--model", help="checkpoint folder, .nemo file or Hub id (default: asr.model)")
    t.add_argument("--window-s", type=float, default=30.0,
                   help="longest window the model sees (default 30 s; silence between speech is skipped)")
    t.add_argument("--overlap-s", type=float, default=4.0,
                   help="audio two windows share where speech is cut (default 4 s, half each side of the cut)")
    t.add_argument("--batch-size", type=int, default=8, help="windows per engine call (default 8)")
    t.add_argument("--device", help="cpu, cuda, cuda:1 (default: asr.device)")
    t.add_argument("--dtype", help="float32 or bfloat16 (default: asr.dtype)")
    t.add_argument("--encoder-backend", help="eager, compiled, onnx, tensorrt (default: asr.encoder_backend)")
    t.add_argument("--format", choices=("text", "json"), default="text")
    t.add_argument("--output-dir", help="write FILE.txt / FILE.json there instead of printing")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--config", "-c", help="TOML config file for the asr.* defaults")
    t.add_argument("--set", "-s", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ray = t.add_argument_group("a corpus on Ray (the [ray] extra)")
    ray.add_argument("--ray", action="store_true",
                     help="FILES are directories (or files): spread every audio file under them over a Ray "
                          "cluster as a Ray Data job on the same engine; transcripts go to --output-dir, "
                          "mirroring each directory (same as `cadence transcribe-ray`)")
    add_ray_arguments(ray, address_flag="--ray-address")
    t.set_defaults(func=friendly(_transcribe))


def _convert(args: argparse.Namespace) -> int:
    from asr.parakeet.loading import convert_nemo

    out = convert_nemo(args.nemo, args.out_dir)
    print(f"wrote {out}")
    return 0


def _tiny(args: argparse.Namespace) -> int:
    from asr.parakeet.tiny import make_tiny_checkpoint, make_tiny_nemo

    kwargs = {"vocab_size": args.vocab_size, "layers": args.layers, "seed": args.seed}
    out = make_tiny_nemo(args.out, **kwargs) if args.out.endswith(".nemo") else make_tiny_checkpoint(args.out, **kwargs)
    print(f"wrote {out} (random weights: its transcripts are nonsense)")
    return 0


def _transcribe_spec(args: argparse.Namespace) -> Any:
    """The Parakeet engine and window plan ``cadence transcribe`` asks for (in-process and on Ray alike)."""
    from agent.config import load_config
    from asr.offline.plan import plan_options
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.shared_engine import resolve_parakeet_model

    asr = load_config(args.config, args.set).asr
    if args.model:
        asr.model = args.model
    plan_options(args.window_s, args.overlap_s)  # a bad pair fails here, before any model loads
    return EngineSpec(engine="parakeet", model=resolve_parakeet_model(asr), device=args.device or asr.device,
                      dtype=args.dtype or asr.dtype, encoder_backend=args.encoder_backend or asr.encoder_backend,
                      max_batch=args.batch_size, max_window_s=args.window_s, overlap_s=args.overlap_s)


def _transcribe(args: argparse.Namespace) -> int:
    """Files of any length through the offline pipeline: decode -> plan -> engine -> stitch."""
    from asr.offline.decode import decode_file
    from asr.offline.engine_factory import make_engine
    from asr.offline.transcriber import transcribe_corpus

    try:
        spec = _transcribe_spec(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.ray:
        return _transcribe_on_ray(args, spec)
    # In-process: the general engine (ParakeetEngine, any --encoder-backend), as before.
    engine = make_engine(dataclasses.replace(spec, parakeet_backend="general"))
    audios = [decode_file(path, engine.sample_rate) for path in args.files]
    results = transcribe_corpus(engine, audios, None, args.batch_size, progress=_progress(not args.no_progress))
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    for path, r in zip(args.files, results, strict=True):
        if args.format == "json":
            body = json.dumps({"file": path, "duration_s": round(r.duration, 3), "text": r.text,
                               "words": [{"text": w.text.strip(), "start": round(w.start, 3),
                                          "end": round(w.end, 3)} for w in r.words]}, ensure_ascii=False)
        else:
            body = r.text
        if out_dir:
            (out_dir / f"{Path(path).name}.{'json' if args.format == 'json' else 'txt'}").write_text(body + "\n")
        elif len(results) > 1 and args.format == "text":
            print(f"{path}: {body}")
        else:
            print(body)
    sys.stdout.flush()
    return 0


def _progress(show: bool) -> Callable[[int, int], None] | None:
    """A tqdm bar over the windows (``(done, total)`` callback), or None."""
    if not show:
        return None
    from asr.parakeet._deps import require

    bar = require("tqdm").tqdm(unit="window", desc="transcribe")

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


def _transcribe_on_ray(args: argparse.Namespace, spec: Any) -> int:
    """``cadence transcribe --ray DIR...``: the same engine and window plan as a Ray Data job."""
    from agent.cli_ray import RayCorpusError, transcribe_corpora

    if not args.output_dir:
        print("cadence transcribe --ray: --output-dir is required (one transcript file per audio file)",
              file=sys.stderr)
        return 2
    try:
        return transcribe_corpora(spec, [Path(f) for f in args.files], Path(args.output_dir), args, args.format)
    except RayCorpusError as exc:
        print(f"cadence transcribe --ray: {exc}", file=sys.stderr)
        return 2
