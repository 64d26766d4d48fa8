"""A chat format for llama.cpp's OpenAI server whose tool calls work under a streaming client.

``cadence-chatml-tools`` (registered by ``agent.llama_serve``) is llama-cpp-python's
``chatml-function-calling`` (a grammar makes the model answer either ``message:`` or ``functions.<name>:`` with JSON arguments
that fit the tool's schema), with four gaps closed:

- "auto" there cannot stream a tool call ("Automatic streaming tool choice is not supported"; pipecat
  always streams) and leaves text answers empty (a grammar meant for the next function name
  constrains the message): here one grammar step picks "message" or a tool, then the answer or
  the tool's arguments stream;
- ``role: tool`` results are dropped by its template (the model would never see them): here they
  become a user-side note naming the function, so the model can speak the result;
- a request with tools and no ``tool_choice`` means ``"auto"`` (OpenAI's rule), not "no tools";
- a streamed call names its function once, as OpenAI does (the stock stream repeats it per chunk).

SmolLM2 uses ChatML, so the prompt is the model's own format. Every completion first moves the
cached turns a context trim kept into place (``agent.llama_cache_reuse``): no re-read after a trim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agent.llama_cache_reuse import CacheReusingLlama

FORMAT = "cadence-chatml-tools"


def plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages the ChatML function-calling template renders: tool results as user-side notes."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        role = m.get("role")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            for call in calls:
                names[call.get("id", "")] = call["function"]["name"]
            m.setdefault("content", None)
            if not calls:
                m.pop("tool_calls", None)
        elif role == "tool":
            name = names.get(m.get("tool_call_id", ""), "the function")
            m = {"role": "user", "content": f"(result of {name}: {m.get('content')})"}
        elif role == "developer":
            m = {"role": "system", "content": m.get("content")}
        out.append(m)
    return out


class _Captured(Exception):
    pass


class _PromptCapture:
    """Stands in for the model to read the prompt ``chatml_function_calling`` renders for "auto"."""

    verbose = False

    def __init__(self) -> None:
        self.prompt = ""

    def create_completion(self, prompt: str, **_kwargs: Any) -> Any:
        self.prompt = prompt
        raise _Captured


def _auto_choice(llama: Any, messages: list[dict[str, Any]], tools: list) -> tuple[str, str]:
    """"message" or the name of the tool the model picks (a grammar allows only those), and the prompt."""
    from llama_cpp import llama_grammar
    from llama_cpp.llama_chat_format import chatml_function_calling

    capture = _PromptCapture()
    with contextlib.suppress(_Captured):
        chatml_function_calling(capture, messages, tools=tools, tool_choice="auto")  # type: ignore[arg-type]
    names = " | ".join(f'"functions.{t["function"]["name"]}:"' for t in tools)
    grammar = llama_grammar.LlamaGrammar.from_string(f'root ::= functions | "message:"\nfunctions ::= {names}\n',
                                                     verbose=False)
    text = llama.create_completion(prompt=capture.prompt, temperature=0, stop=[":"], max_tokens=32,
                                   grammar=grammar)["choices"][0]["text"]
    return (text[len("functions."):] if text.startswith("functions.") else "message"), capture.prompt


def chatml_tools_handler(llama: Any, messages: list[dict[str, Any]], tools: list | None = None,
                         tool_choice: Any = None, stream: bool = False, **kwargs: Any) -> Any:
    """The ``cadence-chatml-tools`` chat completion handler (see the module docstring).

    "auto" is decided here in one grammar-constrained step; then either a text answer on the same
    prompt (no grammar: the stock handler's follow-up grammar leaves text answers empty) or the
    chosen tool's arguments (the stock forced-tool path, which streams).
    """
    from llama_cpp.llama_chat_format import chatml_function_calling

    llama = CacheReusingLlama(llama)  # a trimmed context reuses the cache it still matches
    messages = plain_messages(messages)
    if tools and tool_choice in (None, "auto", "required"):
        choice, prompt = _auto_choice(llama, messages, tools)
        if choice == "message":  # answer on the same prompt: the server's prefix cache holds
            return _message(llama, prompt + "message:\n", stream, kwargs)
        tool_choice = {"type": "function", "function": {"name": choice}}
    out = chatml_function_calling(llama, messages, tools=tools, tool_choice=tool_choice, stream=stream, **kwargs)
    return _name_once(out) if stream and isinstance(tool_choice, dict) else out


_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "typical_p", "max_tokens", "presence_penalty",
             "frequency_penalty", "repeat_penalty", "seed", "model", "logits_processor")


def _message(llama: Any, prompt: str, stream: bool, kwargs: dict[str, Any]) -> Any:
    """A plain text answer to ``prompt``, as a chat completion (or its stream)."""
    from llama_cpp.llama_chat_format import _convert_completion_to_chat

    stop = kwargs.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    sampling = {k: kwargs[k] for k in _SAMPLING if kwargs.get(k) is not None}
    completion = llama.create_completion(prompt=prompt, stop=[*stop, "<|im_end|>"], stream=stream, **sampling)
    return _convert_completion_to_chat(completion, stream=stream)


def _name_once(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The stock stream repeats the function's name (and id) in every chunk; OpenAI clients (pipecat)
    concatenate name fragments, so after the first chunk of a call they are left out."""
    named: set[int] = set()
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            delta.pop("function_call", None)
            for call in delta.get("tool_calls") or []:
                index = call.get("index", 0)
                if index in named:
                    call.pop("id", None)
                    call.pop("type", None)
                    (call.get("function") or {}).pop("name", None)
                else:
                    named.add(index)
        yield chunk


def register() -> None:
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(FORMAT, chatml_tools_handler,
                                                                          overwrite=True)
