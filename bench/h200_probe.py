"""First look on the H200: WHILE-node loop check and per-step cost, encoder variants, transformers' peer.

Usage (device): PYTHONPATH=. python3 bench/h200_probe.py --out $OUT
Each section is independent: a failure is recorded and the next one runs.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from bench.common import calibrate_emission, cuda_time, host_time, make_model, random_audio, write_result

RESULTS: dict[str, Any] = {}


def section(name: str, fn: Callable[[], Any], out: str) -> None:
    t0 = time.perf_counter()
    try:
        RESULTS[name] = fn()
    except Exception:  # noqa: BLE001 - record and carry on
        RESULTS[name] = {"error": traceback.format_exc()[-3000:]}
    RESULTS.setdefault("section_seconds", {})[name] = round(time.perf_counter() - t0, 2)
    print(f"== {name} ({time.perf_counter() - t0:.1f} s): {RESULTS[name]}", flush=True)
    write_result("h200_probe", {"results": RESULTS}, out)


def loop_probe() -> dict[str, Any]:
    from asr.parakeet.decoding.selftest import ToyLoop, compare
    from asr.parakeet.decoding.while_graph import ConditionalLoop, EagerLoop, HostCheckedLoop

    out: dict[str, Any] = {}
    for batch in (1, 16, 128):
        max_time = 200
        lengths = torch.full((batch,), max_time)
        row: dict[str, Any] = {}
        ref = ToyLoop(batch, max_time, seed=batch)
        ref.prepare(lengths)
        EagerLoop(ref.spec()).run()
        want = ref.result()
        steps = int(ref.steps.max())
        for name, cls in (("conditional", ConditionalLoop), ("graphs", HostCheckedLoop), ("eager", None)):
            toy = ToyLoop(batch, max_time, seed=batch)
            toy.prepare(lengths)
            t0 = time.perf_counter()
            runner = EagerLoop(toy.spec()) if cls is None else cls(toy.spec(), torch.device("cuda"))
            build_s = time.perf_counter() - t0

            def go(toy=toy, runner=runner, lengths=lengths) -> None:
                toy.prepare(lengths)
                runner.run()

            timing = host_time(go, warmup=1, iters=5)
            row[name] = {
                "build_s": round(build_s, 4),
                "median_ms": timing["median_s"] * 1e3,
                "us_per_outer_step": timing["median_s"] * 1e6 / max(steps, 1),
                "mismatch": compare(toy.result(), want),
            }
        row["outer_steps"] = steps
        out[f"batch{batch}"] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True

    section("loop", loop_probe, args.out)

    state: dict[str, Any] = {}

    def build() -> dict[str, Any]:
        t0 = time.perf_counter()
        state["model"] = make_model()
        return {
            "make_model_s": round(time.perf_counter() - t0, 2),
            "params_M": sum(p.numel() for p in state["model"].parameters()) / 1e6,
        }

    section("model", build, args.out)
    model = state["model"]

    from asr.parakeet.encoders.fast_conformer import FastConformer
    from asr.parakeet.encoders.shape_profiles import ShapeProfile
    from asr.parakeet.gpu.frontend_graphs import GraphedFrontEnd
    from asr.parakeet.gpu.log_mel import LogMel

    logmel = LogMel().cuda()
    batch, seconds = 128, 30.0
    audio = random_audio(batch, seconds, seed=1)
    lengths = torch.full((batch,), audio.shape[1], device="cuda")
    audio_s = batch * seconds

    def features() -> dict[str, Any]:
        with torch.inference_mode():
            feats, flen = logmel(audio, lengths)
            state["feats"] = feats.to(torch.bfloat16)
            state["mask"] = torch.arange(feats.shape[1], device="cuda")[None] < flen[:, None]
            t = cuda_time(lambda: logmel(audio, lengths), iters=5)
        return {"shape": list(feats.shape), "median_ms": t["median_s"] * 1e3, "rtfx": audio_s / t["median_s"]}

    section("features_gpu", features, args.out)

    def hf_encoder() -> dict[str, Any]:
        feats, mask = state["feats"], state["mask"]
        with torch.inference_mode():
            fn = lambda: model.get_audio_features(input_features=feats, attention_mask=mask).pooler_output  # noqa: E731
            t = cuda_time(fn, iters=3)
            enc = fn()
            state["hf_enc"] = enc
            info = calibrate_emission(model, enc[:8].reshape(-1, enc.shape[-1]))
        return {"median_ms": t["median_s"] * 1e3, "rtfx": audio_s / t["median_s"], "calibration": info}

    section("hf_encoder_b128_30s", hf_encoder, args.out)

    def parity() -> dict[str, Any]:
        fast = FastConformer(model.encoder, model.encoder_projector).to_device("cuda")
        feats, mask = state["feats"][:2].clone(), state["mask"][:2].clone()
        short = 1800  # second clip ~18 s
        mask[1, short:] = False
        feats[1, short:] = 0
        flen = mask.sum(-1)
        with torch.inference_mode():
            want = model.get_audio_features(input_features=feats, attention_mask=mask).pooler_output.float()
            got = fast(feats, flen).float()
        from asr.parakeet.gpu.frontend_graphs import host_encoder_lengths

        enc_len = host_encoder_lengths(flen.cpu().numpy() * 160)
        errs = []
        for i in range(2):
            a, b = got[i, : enc_len[i]], want[i, : enc_len[i]]
            errs.append(float((a - b).norm() / b.norm()))
        return {"rel_err_valid_frames": errs, "enc_len": enc_len.tolist()}

    section("fast_encoder_parity", parity, args.out)

    profile = ShapeProfile("segment", batch, 3072)

    def fast_variant(compiled: bool, dynamic: bool = False) -> dict[str, Any]:
        fast = FastConformer(model.encoder, model.encoder_projector).to_device("cuda")
        if compiled:
            fast.compile_layers(dynamic=dynamic)
        small = ShapeProfile("small", 16, 1024)
        front = GraphedFrontEnd(lambda a, n: fast(*logmel(a, n)), [profile, small])
        t0 = time.perf_counter()
        pg = front.build(profile)
        build_s = time.perf_counter() - t0
        sample_lengths = [audio.shape[1]] * batch
        t = cuda_time(lambda: front.run_profile(pg, audio, sample_lengths), iters=5)
        out = front.run_profile(pg, audio, sample_lengths).float()
        ref = state.get("hf_enc")
        err = None
        if ref is not None:
            frames = ref.shape[1]
            err = float((out[:, :frames] - ref.float()).norm() / ref.float().norm())
        res = {
            "build_s": round(build_s, 1),
            "median_ms": t["median_s"] * 1e3,
            "rtfx_features_plus_encoder": audio_s / t["median_s"],
            "rel_err_vs_hf": err,
        }
        if dynamic:  # a second shape: does the dynamic compile serve it without recompiling?
            t0 = time.perf_counter()
            pg_small = front.build(small)
            res["second_profile_build_s"] = round(time.perf_counter() - t0, 1)
            small_audio = audio[:16, : small.samples]
            ts = cuda_time(lambda: front.run_profile(pg_small, small_audio, [small.samples] * 16), iters=5)
            res["second_profile_rtfx"] = 16 * small.samples / 16000 / ts["median_s"]
        return res

    section("fast_eager_graph_b128_30s", lambda: fast_variant(False), args.out)
    section("fast_compiled_graph_b128_30s", lambda: fast_variant(True), args.out)
    section("fast_compiled_dynamic_graph_b128_30s", lambda: fast_variant(True, dynamic=True), args.out)

    if not args.skip_peer:

        def peer(b: int) -> dict[str, Any]:
            feats, mask = state["feats"][:b], state["mask"][:b]
            with torch.inference_mode():
                res = {}

                def gen() -> None:
                    res["out"] = model.generate(input_features=feats, attention_mask=mask)

                t = host_time(gen, warmup=1, iters=3)
            seqs = res["out"].sequences
            tokens = int((seqs[:, 1:] != model.config.blank_token_id).sum())
            frames = 375 * b
            return {
                "median_ms": t["median_s"] * 1e3,
                "rtfx": b * seconds / t["median_s"],
                "steps_per_clip": (seqs.shape[1] - 1),
                "tokens_per_frame": tokens / frames,
            }

        section("peer_generate_b1_30s", lambda: peer(1), args.out)
        section("peer_generate_b128_30s", lambda: peer(128), args.out)


if __name__ == "__main__":
    main()
