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
