"""``$CADENCE_COMPILE_CACHE``: a compile saved by one process is a cache hit in a fresh one (``asr/compile_cache.py``).

Each side runs in its own interpreter with its own empty Inductor cache folder, as two machines would: the only way
the second can hit is through the carried file. The compile is Kokoro's fused ``add_source`` step through
``Kernels(compiled=True)``, the real restore site (Inductor's C++ backend on the CPU; Triton on CUDA).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

COMPILE_AND_SAVE = """
import json, sys, torch
from asr import compile_cache
from tts.kokoro import fused
restored = compile_cache.restore()  # the Kernels below call it again: once per process
kernels = fused.Kernels(compiled=True)
x, z, r, b = torch.randn(2, 8, 16), torch.randn(2, 8, 16), torch.randn(2, 8, 16), torch.randn(8)
mask = torch.ones(2, 1, 16)
torch.testing.assert_close(kernels.add_source(x, z, b, r, mask), fused.add_source(x, z, b, r, mask))
if "--more" in sys.argv:  # one more kernel: a superset of the first file's artifacts
    torch.testing.assert_close(kernels.mean_leaky(mask, 0.2, x, b, z), fused.mean_leaky(mask, 0.2, x, b, z))
saved = compile_cache.save("test")
counters = torch._dynamo.utils.counters["inductor"]
print(json.dumps({"restored": restored, "saved": str(saved) if saved else None,
                  "hits": counters["fxgraph_cache_hit"], "misses": counters["fxgraph_cache_miss"]}))
"""

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                    reason="torch.compile on the CPU needs a C compiler")


def _run(code: str, env: dict[str, str], *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_compiler
def test_saved_compile_is_a_hit_on_a_fresh_machine(tmp_path: Path) -> None:
    cache = tmp_path / "carried"
    first = _run(COMPILE_AND_SAVE, {"CADENCE_COMPILE_CACHE": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "a")})
    assert first["restored"] == 0 and first["misses"] >= 1 and first["hits"] == 0
    saved = Path(first["saved"])
    assert saved.parent == cache and saved.name.startswith("test-") and saved.suffix == ".bin"
    assert saved.with_suffix(".keys").exists()

    (cache / "truncated.bin").write_bytes(saved.read_bytes()[:100])  # a broken copy is skipped, not fatal
    second = _run(COMPILE_AND_SAVE, {"CADENCE_COMPILE_CACHE": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "b")})
    assert second["restored"] == 1
    assert second["hits"] >= 1 and second["misses"] == 0
    assert second["saved"] is None  # the file it loaded holds everything it used: nothing new to write
    assert sorted(p.name for p in cache.iterdir()) == sorted([saved.name, saved.with_suffix(".keys").name,
                                                              "truncated.bin"])

    third = _run(COMPILE_AND_SAVE, {"CADENCE_COMPILE_CACHE": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")},
                 "--more")
    assert third["hits"] >= 1 and third["misses"] >= 1
    bigger = Path(third["saved"])
    assert bigger != saved and not saved.exists() and not saved.with_suffix(".keys").exists()  # covered: removed
    assert sorted(p.name for p in cache.iterdir()) == sorted([bigger.name, bigger.with_suffix(".keys").name,
                                                              "truncated.bin"])


def test_unset_is_a_no_op_without_torch(tmp_path: Path) -> None:
    code = ("import sys; from asr import compile_cache as c; "
            "print(c.restore(), c.save('x'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "CADENCE_COMPILE_CACHE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "None", "False"]
