"""Trimming keeps the system prompt, the newest turn and the newest result of each tool."""

from __future__ import annotations

from agent.context_window import ContextWindow


def _turn(i: int, words: int = 40) -> list[dict]:
    return [{"role": "user", "content": f"question {i} " + "word " * words},
            {"role": "assistant", "content": f"answer {i} " + "word " * words}]


def _tool_turn(i: int, name: str) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"},
            {"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function",
                                                  "function": {"name": name, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"},
            {"role": "assistant", "content": f"answer {i}"}]


def test_under_budget_nothing_changes():
    window = ContextWindow(window_tokens=2048)
    assert window.fit([{"role": "system", "content": "be brief"}, *_turn(0)]) is None
    assert window.trims == 0


def test_oldest_turns_go_first_and_the_cut_leaves_room():
    window = ContextWindow(window_tokens=1024, reply_tokens=64)
    system = {"role": "system", "content": "be brief"}
    messages = [system, *_tool_turn(0, "lookup"), *_tool_turn(1, "lookup")]
    for i in range(2, 40):
        messages += _turn(i)
    messages += _tool_turn(40, "book")
    messages += _turn(41)
    fitted = window.fit(messages)
    assert fitted is not None and window.trims == 1
    assert fitted[0] is system
    assert fitted[-2:] == messages[-2:]  # the newest turn
    assert window.estimate(fitted) <= window.budget * window.refill_fraction
    contents = [m.get("content") for m in fitted]
    assert "result 1" in contents and "result 0" not in contents  # newest lookup result kept, older dropped
    assert "result 40" in contents
    assert not any(str(c).startswith("question 2 ") for c in contents)  # old chit-chat dropped
    calls = {c["id"] for m in fitted for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in calls for m in fitted if m.get("role") == "tool")


def test_tools_count_against_the_window():
    window = ContextWindow(window_tokens=1024, reply_tokens=64)
    messages = [{"role": "system", "content": "x"}] + [m for i in range(4) for m in _turn(i)]
    assert window.fit(messages) is None
    assert window.fit(messages, tools=[{"description": "y" * 3000}]) is not None
