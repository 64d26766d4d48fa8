"""The embedded LLM server's entry point: ``python -m agent.llama_serve <llama_cpp.server flags>``.

It is ``llama_cpp.server`` with two changes made in-process before the server starts:

- the ``cadence-chatml-tools`` chat format is registered (``agent.llama_tools_format``), for bots
  with tools (``--chat_format cadence-chatml-tools``);
- weight repacking (llama.cpp's "extra buffer types": AMX / AVX-512 matmul kernels) is off unless
  ``--repack`` is given: on this project's CI machines (AMX CPUs in a sandbox) llama-cpp-python
  0.3.36 dies of a general protection fault in ``libggml-cpu`` on its first decode with it on.
"""

from __future__ import annotations

import sys


def disable_repack() -> None:
    """Every model loaded in this process skips the extra (repacking) buffer types."""
    from llama_cpp import llama_cpp as lib

    default = lib.llama_model_default_params

    def params():  # noqa: ANN202 (a ctypes struct)
        p = default()
        p.use_extra_bufts = False
        return p

    lib.llama_model_default_params = params


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--repack" in args:
        args.remove("--repack")
    else:
        disable_repack()
    from agent.llama_tools_format import register

    register()
    from llama_cpp.server.__main__ import main as serve

    sys.argv = [sys.argv[0], *args]
    serve()


if __name__ == "__main__":
    main()
