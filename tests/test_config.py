"""Config: defaults, TOML file, environment and --set overrides, and clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.config import ConfigError, load_config


def test_defaults_are_the_embedded_cpu_stack():
    cfg = load_config(environ={})
    # asr.engine = "auto": Moonshine + the Whisper fallback where moonshine-voice is installed (it is, here)
    assert (cfg.asr.engine, cfg.asr.fallback) == ("moonshine", "whisper")
    assert cfg.llm.base_url == ""  # Cadence starts its own llama.cpp server
    assert cfg.tts.engine == "auto"
    assert cfg.audio.in_sample_rate == 16000


def test_precedence_file_then_env_then_flags(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[llm]\nmax_tokens = 32\ntemperature = 0.5\n[asr]\nengine = "parakeet"\n')
    env = {"CADENCE_LLM__MAX_TOKENS": "40", "CADENCE_SERVER__PORT": "9000"}
    cfg = load_config(path, ["llm.max_tokens=48", "runtime.gc_freeze=false"], environ=env)
    assert cfg.llm.max_tokens == 48  # flag beats env beats file
    assert cfg.llm.temperature == 0.5  # from the file
    assert cfg.server.port == 9000  # from the environment
    assert cfg.asr.engine == "parakeet"
    assert cfg.runtime.gc_freeze is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["nosuch.key=1"], "unknown section [nosuch]"),
        (["llm.nosuch=1"], "unknown key llm.nosuch"),
        (["llm.max_tokens=many"], "cannot read 'many' as int"),
        (["llm.max_tokens"], "expected section.key=value"),
        (["runtime.uvloop=maybe"], "as bool"),
    ],
)
def test_bad_overrides_say_what_is_wrong(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(None, overrides, environ={})


def test_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})


def test_config_show_round_trips(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "config", "show", "--set", "llm.max_tokens=33"],
        capture_output=True, text=True, check=True,
    ).stdout
    path = tmp_path / "shown.toml"
    path.write_text(out)
    cfg = load_config(path, environ={})
    assert cfg.llm.max_tokens == 33
    assert cfg.llm.system_prompt.startswith("You are Cadence")


def test_cli_reports_config_errors_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "config", "show", "--set", "llm.max_tokens=x"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "cadence: error:" in proc.stderr and "Traceback" not in proc.stderr


def test_auto_asr_falls_back_to_whisper_without_moonshine(monkeypatch):
    import agent.models as models

    def missing():
        raise models.ModelNotFoundError("package 'moonshine_voice' is not installed")

    monkeypatch.setattr(models, "moonshine_model_dir", missing)
    cfg = load_config(environ={})
    assert (cfg.asr.engine, cfg.asr.fallback) == ("whisper", "")
    explicit = load_config(None, ["asr.engine=moonshine"], environ={})  # named engines are kept as given
    assert (explicit.asr.engine, explicit.asr.fallback) == ("moonshine", "")
    assert load_config(None, ["asr.fallback=whisper"], environ={}).asr.fallback == "whisper"
