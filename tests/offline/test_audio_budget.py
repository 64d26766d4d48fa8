"""The decoded-audio budget: requests wait in order until their audio fits."""

from __future__ import annotations

import asyncio

from asr.offline.audio_budget import AudioBudget


def test_requests_wait_in_order_until_their_audio_fits() -> None:
    async def run() -> list[str]:
        budget = AudioBudget(max_seconds=3600)
        events: list[str] = []
        release = {k: asyncio.Event() for k in "abcd"}

        async def request(name: str, seconds: float) -> None:
            async with budget.reserve(seconds):
                events.append(f"+{name}")
                await release[name].wait()
            events.append(f"-{name}")

        tasks = [asyncio.create_task(request("a", 3000))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(request("b", 1200)))  # does not fit beside a
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(request("c", 100)))  # would fit, but b came first
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(request("d", 7200)))  # longer than the budget: alone
        await asyncio.sleep(0.01)
        assert events == ["+a"] and budget.held == 3000
        release["a"].set()
        await asyncio.sleep(0.01)
        assert events == ["+a", "-a", "+b", "+c"] and budget.held == 1300
        release["b"].set()
        release["c"].set()
        await asyncio.sleep(0.01)
        assert events[-1] == "+d" and budget.held == 7200
        release["d"].set()
        await asyncio.gather(*tasks)
        assert budget.held == 0
        return events

    asyncio.run(run())


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def run() -> None:
        budget = AudioBudget(max_seconds=10)
        async with budget.reserve(10):
            waiter = asyncio.create_task(budget.reserve(5).__aenter__())
            await asyncio.sleep(0.01)
            waiter.cancel()
            await asyncio.sleep(0.01)
        async with budget.reserve(5):  # not blocked by the cancelled ticket
            assert budget.held == 5

    asyncio.run(asyncio.wait_for(run(), 5))


def test_taking_at_once_keeps_the_order_of_waiters() -> None:
    """``try_take`` (the engine process's fast path) never jumps a waiter, and giving back wakes it."""
    async def run() -> None:
        budget = AudioBudget(max_seconds=100)
        assert budget.try_take(80) and budget.held == 80
        reservation = budget.reserve(50)
        waiter = asyncio.create_task(reservation.__aenter__())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        assert not budget.try_take(10)  # it would fit, but the waiter came first
        budget.give_back(80)
        await asyncio.wait_for(waiter, 1)
        assert budget.held == 50
        assert budget.try_take(50) and not budget.try_take(1) and budget.held == 100
        budget.give_back(50)
        assert budget.try_take(1000) is False and budget.held == 50  # too big beside what is held
        await reservation.__aexit__(None, None, None)
        assert budget.held == 0 and budget.try_take(1000)  # longer than the budget: alone

    asyncio.run(asyncio.wait_for(run(), 5))
