"""Typed Python functions become tool schemas; bad tools and bot files fail with one clear line."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

import pytest

from agent.bot import Bot, Say
from agent.bot_loader import BotFileError, load_bot
from agent.tools import Call, Tool, ToolDefinitionError


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_signature_and_docstring_become_the_schema():
    def book(day: Literal["Monday", "Tuesday"], seats: int, colour: Colour, note: Annotated[str, "free text"] = "",
             tags: list[str] | None = None, call: Call | None = None) -> str:
        """Book a table.

        Args:
            day: the day to book
            seats: how many people
        """
        return ""

    schema = Tool.from_function(book).schema.to_default_dict()
    assert schema["name"] == "book" and schema["description"] == "Book a table."
    props = schema["parameters"]["properties"]
    assert props["day"] == {"type": "string", "enum": ["Monday", "Tuesday"], "description": "the day to book"}
    assert props["seats"] == {"type": "integer", "description": "how many people"}
    assert props["colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["note"] == {"type": "string", "description": "free text"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert "call" not in props  # the live call is given, not asked of the model
    assert schema["parameters"]["required"] == ["day", "seats", "colour"]


def test_arguments_are_bound_and_checked():
    seen = {}

    async def pick(colour: Colour, call: Call) -> Say:
        seen.update(colour=colour, call=call)
        return Say("ok")

    import asyncio

    tool = Tool.from_function(pick)
    assert asyncio.run(tool.invoke({"colour": "red", "extra": 1}, call="CALL")) == Say("ok")  # type: ignore[arg-type]
    assert seen == {"colour": Colour.RED, "call": "CALL"}
    with pytest.raises(ValueError, match="missing arguments"):
        tool.bind({}, None)


def test_bad_tools_are_refused_where_they_are_defined():
    def untyped(x):  # noqa: ANN001
        return x

    def odd(x: dict[str, set[bytes]]) -> None: ...

    with pytest.raises(ToolDefinitionError, match="needs a type hint"):
        Tool.from_function(untyped)
    with pytest.raises(ToolDefinitionError, match="unsupported type"):
        Tool.from_function(odd)
    with pytest.raises(ToolDefinitionError, match="share the name"):
        Bot("x", tools=[_hello, _hello])
    with pytest.raises(ToolDefinitionError, match="no such tool"):
        Bot("x", tools=[_hello], tool_choice="goodbye").tool_choice  # noqa: B018
    with pytest.raises(Exception, match="unknown key"):
        Bot("x", settings={"llm.nope": 1})


def _hello() -> str:
    """Say hello."""
    return "hello"


def test_bot_files_load_or_fail_clearly(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("from agent.bot import Bot\nbot = Bot('You are a test.', greeting='Hi')\n"
                    "if __name__ == '__main__':\n    raise SystemExit('must not run')\n")
    bot = load_bot(good)
    assert bot.settings["llm.system_prompt"] == "You are a test." and bot.settings["call.greeting"] == "Hi"
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    broken = tmp_path / "broken.py"
    broken.write_text("def (\n")
    for path, reason in [(empty, "no Bot"), (broken, "not valid Python"), (tmp_path / "missing.py", "not found")]:
        with pytest.raises(BotFileError, match=reason):
            load_bot(path)
