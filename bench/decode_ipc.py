"""Where decoding happens and how its audio travels: threads vs worker processes over a pipe vs
worker processes handing over shared memory with small messages on a persistent Unix socket.

Native decode releases the GIL, so threads in the serving process are the simple baseline. The
process modes pay for moving audio back: ``pipe`` pickles each array through a
``ProcessPoolExecutor`` pipe; ``shm_uds`` has each worker write the array into a
``multiprocessing.shared_memory`` block and send only ``{name, samples}`` over a socketpair it
keeps for its life. Two measurements: the bare transfer of one hour of 16 kHz float32
(230 MB; the worker makes it without decoding), and decoding N files end to end.

Usage: python bench/decode_ipc.py [--files 8] [--seconds 300] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asr.offline.decode import decode_file  # noqa: E402
from bench.offline_report import save  # noqa: E402
from testkit.offline_audio import write_audio  # noqa: E402

HOUR = 3600 * 16000


def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock: socket.socket) -> dict[str, Any] | None:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("!I", head)
    return json.loads(sock.recv(n, socket.MSG_WAITALL))


def _produce(job: dict[str, Any]) -> np.ndarray:
    if job["path"] == "<hour>":
        return np.full(HOUR, 0.25, np.float32)
    return decode_file(job["path"], 16000, chunk_s=1e9)


def _shm_worker(sock: socket.socket) -> None:
    """Serve jobs on ``sock`` until it closes: decode, write into shared memory, reply with its name."""
    while (job := _recv(sock)) is not None:
        audio = _produce(job)
        shm = shared_memory.SharedMemory(create=True, size=max(audio.nbytes, 1))
        np.ndarray(audio.shape, np.float32, buffer=shm.buf)[:] = audio
        resource_tracker.unregister(shm._name, "shared_memory")  # the reader unlinks it
        name = shm.name
        shm.close()
        _send(sock, {"id": job["id"], "shm": name, "samples": int(audio.size)})


class ShmUdsPool:
    """Persistent worker processes, one socketpair each; audio comes back through shared memory."""

    def __init__(self, workers: int) -> None:
        ctx = mp.get_context("spawn")
        self.socks, self.procs = [], []
        for _ in range(workers):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            proc = ctx.Process(target=_shm_worker, args=(theirs,), daemon=True)
            proc.start()
            theirs.close()
            self.socks.append(ours)
            self.procs.append(proc)
        self.free: list[socket.socket] = list(self.socks)
        self.cond = threading.Condition()

    def run(self, path: str) -> np.ndarray:
        with self.cond:
            while not self.free:
                self.cond.wait()
            sock = self.free.pop()
        try:
            _send(sock, {"id": 0, "path": path})
            reply = _recv(sock)
        finally:
            with self.cond:
                self.free.append(sock)
                self.cond.notify()
        assert reply is not None
        shm = shared_memory.SharedMemory(name=reply["shm"])
        try:
            view = np.ndarray((reply["samples"],), np.float32, buffer=shm.buf)
            checksum = float(view[:: 16000].sum())  # touch it as a consumer would
            out = view.copy() if reply["samples"] < 0 else checksum  # keep zero-copy: no copy out
        finally:
            del view
            shm.close()
            shm.unlink()
        return np.asarray([out])

    def warm(self) -> None:
        for sock in self.socks:
            _send(sock, {"id": -1, "path": "<hour>"})
            reply = _recv(sock)
            assert reply is not None
            shared_memory.SharedMemory(name=reply["shm"]).unlink()

    def close(self) -> None:
        for s in self.socks:
            s.close()
        for p in self.procs:
            p.join(timeout=10)


def _pipe_job(path: str) -> np.ndarray:
    return _produce({"path": path})


def run_mode(mode: str, paths: list[str], workers: int, concurrency: int) -> dict[str, Any]:
    if mode == "threads":
        runner, close = ThreadPoolExecutor(workers).submit, None
        fn = _pipe_job
    elif mode == "pipe":
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
        list(pool.map(_pipe_job, ["<hour>"] * workers))  # start and warm the workers
        runner, close, fn = pool.submit, pool.shutdown, _pipe_job
    else:
        shm = ShmUdsPool(workers)
        shm.warm()
        runner, close = ThreadPoolExecutor(concurrency).submit, shm.close
        fn = shm.run
    t0 = time.perf_counter()
    futures = [runner(fn, p) for p in paths]
    for f in futures:
        f.result()
    wall = time.perf_counter() - t0
    if close is not None:
        close()
    return {"wall_s": round(wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = np.arange(int(args.seconds * 44100)) / 44100
        stereo = np.stack([0.2 * np.sin(2 * np.pi * 220 * t), 0.2 * np.sin(2 * np.pi * 330 * t)], 1)
        first = write_audio(Path(tmp) / "f0.mp3", stereo.astype(np.float32), 44100)
        files = [str(first)] + [str(shutil.copy(first, Path(tmp) / f"f{i}.mp3")) for i in range(1, args.files)]
        cases = [("transfer_1h", ["<hour>"] * args.workers * 2, args.seconds),
                 (f"decode_{args.files}x{args.seconds:g}s_mp3", files, args.seconds)]
        for case, paths, _ in cases:
            for mode in ("threads", "pipe", "shm_uds"):
                best = min((run_mode(mode, paths, args.workers, len(paths)) for _ in range(args.repeats)),
                           key=lambda r: r["wall_s"])
                audio_s = (HOUR / 16000 if paths[0] == "<hour>" else args.seconds) * len(paths)
                row = {"case": case, "mode": mode, "items": len(paths), **best,
                       "audio_s_per_wall_s": round(audio_s / best["wall_s"], 1)}
                rows.append(row)
                print(f"{case:22s} {mode:8s}: {row['wall_s']:.3f} s for {len(paths)} items "
                      f"({row['audio_s_per_wall_s']} audio s/s)", flush=True)
    by = {(r["case"], r["mode"]): r["wall_s"] for r in rows}
    ratios = {f"{case}_{m}_vs_threads": round(by[(case, m)] / by[(case, "threads")], 2)
              for case, _, _ in cases for m in ("pipe", "shm_uds")}
    ratios.update({f"{case}_shm_uds_vs_pipe": round(by[(case, "shm_uds")] / by[(case, "pipe")], 2)
                   for case, _, _ in cases})
    for k, v in ratios.items():
        print(f"{k}: {v}x wall time")
    print(f"wrote {save('decode_ipc_cpu', {'workers': args.workers, 'results': rows, 'ratios': ratios}, args.out)}")


if __name__ == "__main__":
    main()
