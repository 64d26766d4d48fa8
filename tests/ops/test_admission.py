"""The admission gate: cap, bounded FIFO queue, refusals, overload from budgets, ready()."""

from __future__ import annotations

import asyncio

from agent.admission import AdmissionGate, Refusal
from agent.config import AdmissionConfig


def gate(cap: int = 2, queue: int = 1, timeout: float = 0.3, overloaded=None) -> AdmissionGate:
    return AdmissionGate(AdmissionConfig(max_sessions=cap, queue_size=queue, queue_timeout_s=timeout,
                                         retry_after_s=7), overloaded)


async def test_three_times_offered_load_admits_cap_queues_then_refuses() -> None:
    g = gate(cap=2, queue=1, timeout=0.3)
    results = await asyncio.gather(*(g.acquire() for _ in range(6)))
    admitted = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, Refusal)]
    assert len(admitted) == 2 and len(refused) == 4
    assert g.active == 2 and g.waiting == 0
    assert {r.kind for r in refused} == {"queue_full", "queue_timeout"}
    assert sum(r.kind == "queue_timeout" for r in refused) == 1
    assert all(r.status == 503 and r.retry_after_s == 7 and r.close_code == 1013 for r in refused)
    assert g.ready() == (False, "at capacity: 2/2 sessions")


async def test_queued_caller_gets_the_released_slot_in_order() -> None:
    g = gate(cap=1, queue=2, timeout=2.0)
    assert await g.acquire() is None
    first = asyncio.create_task(g.acquire())
    second = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    assert g.waiting == 2
    newcomer = await g.acquire()  # queue full
    assert isinstance(newcomer, Refusal) and newcomer.kind == "queue_full"
    g.release()
    assert await first is None and not second.done()
    assert g.active == 1
    g.release()
    assert await second is None
    g.release()
    assert g.active == 0 and g.ready()[0]
    assert g.stats.admitted_total == 3


async def test_caller_leaving_the_queue_does_not_leak_a_slot() -> None:
    g = gate(cap=1, queue=1, timeout=5.0)
    assert await g.acquire() is None
    waiting = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert g.waiting == 0
    g.release()
    assert g.active == 0 and await g.acquire() is None


async def test_budget_breach_refuses_only_while_someone_is_talking() -> None:
    reason: list[str | None] = [None]
    g = gate(cap=4, overloaded=lambda: reason[0])
    assert await g.acquire() is None
    reason[0] = "asr_final p99 900 ms > budget 600 ms"
    ok, why = g.ready()
    assert not ok and "asr_final" in why
    refusal = await g.acquire()
    assert isinstance(refusal, Refusal) and refusal.kind == "overloaded" and "asr_final" in refusal.reason
    g.release()  # nobody is talking now: an empty server never refuses for budgets
    assert g.ready()[0] and await g.acquire() is None


async def test_resize_admits_waiters() -> None:
    g = gate(cap=1, queue=2, timeout=2.0)
    assert await g.acquire() is None
    waiter = asyncio.create_task(g.acquire())
    await asyncio.sleep(0.01)
    g.resize(2)
    assert await waiter is None and g.active == 2
