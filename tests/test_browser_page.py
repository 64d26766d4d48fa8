"""The WebRTC page in real headless Chromium: loads with no console errors, and Talk connects."""

from __future__ import annotations

import shutil

import pytest

from tests.test_webrtc_e2e import server  # noqa: F401  (shared module fixture)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
]


@pytest.fixture
def page():
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_page_loads_without_console_errors_and_talk_connects(server, page):  # noqa: F811
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(server["url"] + "/")
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
