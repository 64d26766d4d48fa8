"""Bot tools: plain Python functions (sync or async) the LLM can call.

A tool's typed parameters become its JSON schema (pipecat ``FunctionSchema``): ``str``, ``int``,
``float``, ``bool``, ``Literal[...]`` and ``Enum`` (an ``enum``: llama.cpp's grammar then only lets
the model pick one of them), ``list[X]``, ``X | None``; a parameter with a default is optional.
Descriptions come from the docstring (first paragraph; ``Args:`` for parameters) or from
``Annotated[str, "description"]``. A parameter annotated ``Call`` gets the live call (to hang up)
and is not shown to the model.

A tool returns any JSON-able value (the LLM then answers with it in context), or ``Say(text)``: the
text is spoken as is and no second LLM pass runs (faster, and the only reliable way with the
embedded 135M model, which cannot phrase results).
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, Union, get_args, get_origin

import docstring_parser
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema


class ToolDefinitionError(TypeError):
    """A function that cannot be offered as a tool (unsupported parameter type, bad name)."""


@dataclass(frozen=True)
class Say:
    """A tool result spoken to the caller word for word (no LLM pass after the tool)."""

    text: str


class Call(Protocol):
    """The live call, for a tool that declares a parameter of this type."""

    session_id: str

    async def hang_up(self, goodbye: str | None = None) -> None:
        """Say ``goodbye`` (the configured one when None), then end the call."""
        ...


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one parameter's type hint."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extra = get_args(hint)
        schema = json_schema(base, where)
        texts = [e for e in extra if isinstance(e, str)]
        if texts:
            schema["description"] = texts[0]
        return schema
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is Literal:
        values = list(get_args(hint))
        kinds = {_SIMPLE.get(type(v)) for v in values}
        if None in kinds or len(kinds) != 1:
            raise ToolDefinitionError(f"{where}: Literal values must all be str, int, float or bool")
        return {"type": kinds.pop(), "enum": values}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return json_schema(Literal[tuple(m.value for m in hint)], where)  # type: ignore[misc]
    if origin in (list, tuple, set) or hint in (list, tuple, set):
        args = get_args(hint)
        return {"type": "array", **({"items": json_schema(args[0], where)} if args else {})}
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return json_schema(args[0], where)
        return {"anyOf": [json_schema(a, where) for a in args]}
    raise ToolDefinitionError(f"{where}: unsupported type {hint!r} (use str, int, float, bool, Literal, Enum, "
                              "list[...] or Optional)")


def _is_call(hint: Any) -> bool:
    """``Call``, ``Call | None`` or ``Annotated[Call, ...]``."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    return hint is Call


@dataclass
class Tool:
    """A function offered to the LLM, with its schema."""

    fn: Callable[..., Any]
    schema: FunctionSchema
    call_param: str | None = None
    filler: str | None = None
    enums: dict[str, type[enum.Enum]] | None = None

    @property
    def name(self) -> str:
        return self.schema.name

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                      filler: str | None = None) -> Tool:
        if not callable(fn):
            raise ToolDefinitionError(f"a tool must be a function, got {fn!r}")
        name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ToolDefinitionError(f"tool name {name!r}: 1-64 letters, digits, '_' or '-' (OpenAI's rule)")
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        docs = {p.arg_name: (p.description or "") for p in doc.params}
        hints = typing.get_type_hints(fn, include_extras=True)
        properties: dict[str, Any] = {}
        required: list[str] = []
        call_param = None
        enums: dict[str, type[enum.Enum]] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolDefinitionError(f"tool {name}: *args / **kwargs cannot be described to the model")
            if pname not in hints:
                raise ToolDefinitionError(f"tool {name}: parameter {pname!r} needs a type hint")
            hint = hints[pname]
            if _is_call(hint):
                call_param = pname
                continue
            schema = json_schema(hint, f"tool {name}, parameter {pname!r}")
            if docs.get(pname) and "description" not in schema:
                schema["description"] = docs[pname]
            if isinstance(hint, type) and issubclass(hint, enum.Enum):
                enums[pname] = hint
            properties[pname] = schema
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        text = description or " ".join(p for p in (doc.short_description, doc.long_description) if p) or name
        return cls(fn, FunctionSchema(name=name, description=text, properties=properties, required=required),
                   call_param, filler, enums or None)

    def bind(self, arguments: dict[str, Any], call: Call | None) -> dict[str, Any]:
        """Keyword arguments for ``fn`` from the model's arguments; raises ``ValueError`` when unusable."""
        known = set(self.schema.properties)
        missing = [p for p in self.schema.required if p not in arguments]
        if missing:
            raise ValueError(f"missing arguments {missing}")
        kwargs = {k: v for k, v in arguments.items() if k in known}
        for pname, kind in (self.enums or {}).items():
            if pname in kwargs:
                kwargs[pname] = kind(kwargs[pname])
        if self.call_param:
            kwargs[self.call_param] = call
        return kwargs

    async def invoke(self, arguments: dict[str, Any], call: Call | None) -> Any:
        """Run the function (a sync one in a worker thread, off the event loop)."""
        import asyncio

        kwargs = self.bind(arguments, call)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            return await typing.cast(Awaitable[Any], result)
        return result


def as_tools(items: list[Callable[..., Any] | Tool]) -> list[Tool]:
    """Functions (or ``Tool``s) as ``Tool``s; names must be unique."""
    tools = [t if isinstance(t, Tool) else Tool.from_function(t) for t in items]
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ToolDefinitionError(f"two tools share the name(s) {dupes}")
    return tools
