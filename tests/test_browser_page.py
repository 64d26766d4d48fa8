"""The WebRTC page in real headless Chromium (Debian's ``chromium``, driven by playwright).

It loads with no console errors and Talk connects; with a fake microphone playing a recorded prompt
the transcript of what it said, and the turn's stage times, appear on the page, over loopback ICE;
a refused call (lines busy, missing key) and a denied microphone are explained in words.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from aiohttp import web

from agent.config import Config
from agent.server_factory import make_server
from testkit.corpus import pick, wer
from transports.audio_io import load_audio

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BASE_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--use-fake-device-for-media-stream",
    # ICE on loopback: Chromium gathers 127.0.0.1 and shows it (no mDNS name); the server offers only it.
    "--allow-loopback-in-peer-connection", "--disable-features=WebRtcHideLocalIpsWithMdns",
]
ARGS = [*BASE_ARGS, "--use-fake-ui-for-media-stream"]  # the microphone is granted without a prompt
HEARD_WER_MAX = 0.35  # one prompt, Whisper tiny.en: as tests/test_webrtc_e2e.py


@contextmanager
def browser_page(args: list[str]) -> Iterator:
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (scripts/install.sh --test installs it)")
    from playwright.sync_api import sync_playwright  # a dev dependency: missing is an error, not a skip

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield browser.new_page()
        finally:
            browser.close()


@contextmanager
def app_in_thread(app: web.Application) -> Iterator[str]:
    """Serve ``app`` on loopback from a thread with its own event loop (playwright's API here is sync)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(app)

    async def start() -> str:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_page_loads_without_console_errors_and_talk_connects(webrtc_server):
    with browser_page(ARGS) as page:
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.goto(webrtc_server["url"] + "/")
        assert page.title() == "Cadence voice agent"
        assert page.text_content("#status") == "idle"
        page.click("#talk")  # fake microphone: Chromium's built-in test tone
        page.wait_for_function("document.getElementById('status').textContent === 'connection: connected'",
                               timeout=30000)
        assert page.text_content("#talk") == "Hang up"
        page.wait_for_function("document.getElementById('bot').srcObject !== null", timeout=10000)
        page.click("#talk")
        assert page.text_content("#status") == "idle"
        assert problems == [], problems


def _caller_wav(path: Path, name: str) -> str:
    """The prompt at 48 kHz between half a second and four seconds of silence (Chromium loops the file)."""
    audio = load_audio(pick([name])[0].path, 48000)
    silence = np.zeros(48000 * 4, dtype=np.float32)
    sf.write(path, np.concatenate([silence[:24000], audio, silence]), 48000, subtype="PCM_16")
    return str(path)


REMOTE_ADDRESS_JS = """async () => {
  const stats = await pc.getStats();
  for (const s of stats.values())
    if (s.type === "candidate-pair" && s.state === "succeeded" && s.nominated)
      return stats.get(s.remoteCandidateId).address;
  return null;
}"""


def test_what_the_caller_said_appears_on_the_page(webrtc_server, tmp_path):
    prompt = pick(["conf-onlyperson"])[0]
    wav = _caller_wav(tmp_path / "caller.wav", prompt.name)
    with browser_page([*ARGS, f"--use-file-for-fake-audio-capture={wav}"]) as page:
        page.goto(webrtc_server["url"] + "/")
        page.click("#talk")
        page.wait_for_function("document.querySelector('#log .heard span:last-child')?.textContent.length > 0",
                               timeout=60000)
        heard = page.text_content("#log .turn:last-child .heard span:last-child") or ""
        assert wer(prompt.text, heard) <= HEARD_WER_MAX, f"the page shows {heard!r} for {prompt.text!r}"
        # The turn's stage times appear when it ends.
        page.wait_for_function("document.querySelector('#log .turn:last-child .timings')"
                               "?.textContent.includes('end of speech')", timeout=60000)
        assert "ms" in (page.text_content("#log .turn:last-child .timings") or "")
        assert page.evaluate(REMOTE_ADDRESS_JS) == "127.0.0.1"
        page.click("#talk")


def _refusal_shown(url: str) -> str:
    with browser_page(ARGS) as page:
        page.goto(url)
        page.click("#talk")
        page.wait_for_function("document.getElementById('error').textContent.length > 0", timeout=20000)
        assert page.text_content("#status") == "idle"
        return page.text_content("#error") or ""


def test_refused_calls_are_explained():
    busy = Config()
    busy.admission.max_sessions, busy.admission.queue_size = 0, 0
    with app_in_thread(make_server(busy).make_app()) as url:
        shown = _refusal_shown(url + "/")
    assert shown.startswith("All lines are busy") and "Try again in 5 s" in shown, shown
    keyed = Config()
    keyed.server.api_key = "page-test-key"
    with app_in_thread(make_server(keyed).make_app()) as url:
        shown = _refusal_shown(url + "/")
    assert shown.startswith("Not authorized") and "?token=" in shown, shown


def test_denied_microphone_is_explained(webrtc_server):
    with browser_page(BASE_ARGS) as page:  # no fake UI: headless Chromium denies the prompt
        page.goto(webrtc_server["url"] + "/")
        page.click("#talk")
        page.wait_for_function("document.getElementById('error').textContent.length > 0", timeout=20000)
        assert page.text_content("#error").startswith("Microphone access was denied")
