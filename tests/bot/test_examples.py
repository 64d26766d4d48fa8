"""The examples run as users run them (``python examples/...``), on the public API only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm_server import embedded_llama_server
from testkit.corpus import pick

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def example(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=timeout)


def test_examples_use_no_private_paths():
    for path in (ROOT / "examples").glob("*.py"):
        text = path.read_text()
        assert "sys.path" not in text, path
        assert "agent.talk" not in text and "_talk_once" not in text, path


def test_appointment_desk_serves_with_the_cadence_flags():
    proc = example("examples/appointment_desk.py", "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--port" in proc.stdout and "--set" in proc.stdout


def test_phone_bot_answers_a_local_call(tmp_path):
    prompt = pick(["agent-pass"])[0]
    reply = tmp_path / "reply.wav"
    proc = example("examples/phone_bot.py", "--port", "0", "--try-call", str(prompt.path), "--reply-wav", str(reply),
                   "--set", "llm.max_tokens=24", "--set", "llm.request_timeout_s=60")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "greeting heard" in proc.stdout and "first bot audio" in proc.stdout, proc.stdout
    assert reply.stat().st_size > 8000


def test_drop_in_services_uses_the_configured_llm_server(tmp_path):
    prompt = pick(["agent-pass"])[0]
    log = tmp_path / "llm.log"
    out = tmp_path / "reply.wav"
    with embedded_llama_server(threads=2, log_path=log, api_key="k-drop-in") as server:
        proc = example("examples/drop_in_services.py", str(prompt.path), "--out", str(out),
                       env={"CADENCE_LLM__BASE_URL": server.base_url, "CADENCE_LLM__API_KEY": "k-drop-in",
                            "CADENCE_LLM__MAX_TOKENS": "24", "CADENCE_LLM__REQUEST_TIMEOUT_S": "60"})
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert f"llm: {server.base_url}" in proc.stdout
    said = re.search(r"bot said: (['\"])(.+)\1", proc.stdout)
    assert said and said.group(2).strip(), proc.stdout
    assert "POST /v1/chat/completions" in log.read_text(), "the example did not use the configured server"
    assert out.stat().st_size > 8000
