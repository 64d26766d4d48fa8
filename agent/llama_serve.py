"""The embedded LLM server's entry point: ``python -m agent.llama_serve <llama_cpp.server flags>``.

It is ``llama_cpp.server`` with the ``cadence-chatml-tools`` chat format registered first
(``agent.llama_tools_format``), so bots with tools work on the embedded model
(``--chat_format cadence-chatml-tools``; requests without tools get plain ChatML).
"""

from __future__ import annotations


def main() -> None:
    from agent.llama_tools_format import register

    register()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
