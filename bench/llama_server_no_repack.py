"""``python -m llama_cpp.server`` with llama.cpp's extra weight buffers (AMX/repack) turned off.

On the 2-core sandbox VM (Firecracker), a llama-cpp-python wheel built with ``GGML_NATIVE`` uses
AMX tiles for SmolLM2's Q4_1 weights and dies with a general protection fault on the first
completion, although the kernel grants AMX (``scripts/install.sh`` now builds a portable wheel).
``bench/webrtc_latency.py --no-repack`` starts its shared LLM server through this wrapper, for such a
build; the arguments are ``llama_cpp.server``'s own.
"""

from __future__ import annotations

import runpy

import llama_cpp
import llama_cpp.llama

_default = llama_cpp.llama_model_default_params


def _no_extra_buffers() -> llama_cpp.llama_model_params:
    params = _default()
    params.use_extra_bufts = False
    return params


llama_cpp.llama_model_default_params = _no_extra_buffers
llama_cpp.llama.llama_cpp.llama_model_default_params = _no_extra_buffers

if __name__ == "__main__":
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
