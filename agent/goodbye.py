"""A spoken goodbye for a live call at server shutdown.

The bot is interrupted (an answer in progress is cut: LLM, TTS and the caller's playout), then
the goodbye is spoken like any bot reply. It counts as said once the output transport has sent
all of its audio: the bot started speaking after the goodbye entered the pipeline, then stopped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    TTSSpeakFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed


class GoodbyeWatch(BaseObserver):
    """Sets ``said`` when the bot finished speaking a stretch begun after ``speak`` entered the pipeline.

    Each frame is seen on its first push only: the output transport's ``BotStoppedSpeakingFrame`` for the answer
    the goodbye interrupted travels on upstream, hop by hop, and a later hop of it could otherwise pass for the end
    of the goodbye just after its start (CI saw the goodbye counted as said 1 ms after it began).
    """

    def __init__(self, speak: TTSSpeakFrame) -> None:
        super().__init__(observe_every_push=False)
        self._speak = speak
        self._queued = False  # our speak frame was pushed: earlier speech is behind us
        self._speaking = False
        self.said = asyncio.Event()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if not data.first_push:  # a later hop of a frame already judged
            return
        if frame is self._speak:
            self._queued = True
        elif self._queued and isinstance(frame, BotStartedSpeakingFrame):
            self._speaking = True
        elif self._speaking and isinstance(frame, BotStoppedSpeakingFrame):
            self.said.set()


async def _finished(worker: Any, poll_s: float = 0.05) -> None:
    """Returns once ``worker``'s pipeline has ended (a caller gone meanwhile: nothing more is sent)."""
    while not worker.has_finished():
        await asyncio.sleep(poll_s)


async def say_goodbye(worker: Any, text: str, timeout_s: float, label: str = "") -> bool:
    """Interrupt the bot, speak ``text`` and wait (at most ``timeout_s``) until its audio is sent.

    ``worker`` is the caller's running ``PipelineWorker``. True when the goodbye went out in time; False
    at once if the pipeline ends first (its caller was already gone).
    """
    if worker.has_finished():
        return False
    speak = TTSSpeakFrame(text, append_to_context=False)
    speak.interruptible = False  # the caller talking over it does not cut it short in the TTS
    watch = GoodbyeWatch(speak)
    worker.add_observer(watch)
    said = ended = None
    try:
        await worker.queue_frames([InterruptionFrame(), speak])
        said, ended = asyncio.ensure_future(watch.said.wait()), asyncio.ensure_future(_finished(worker))
        await asyncio.wait({said, ended}, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
        if watch.said.is_set():
            logger.info(f"{label}: goodbye said")
            return True
        if ended.done():
            logger.info(f"{label}: no goodbye: the call ended first")
        else:
            logger.warning(f"{label}: goodbye not finished within {timeout_s:.1f} s; closing anyway")
        return False
    except Exception as exc:  # a worker already torn down: nothing to say goodbye on
        logger.debug(f"{label}: no goodbye: {exc!r}")
        return False
    finally:
        for task in (said, ended):
            if task is not None:
                task.cancel()
        try:
            await worker.remove_observer(watch)
        except Exception as exc:
            logger.debug(f"{label}: remove goodbye observer: {exc!r}")
