"""A call that reaches ``session.max_duration_s`` hears ``call.max_duration_goodbye``, then ends."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import numpy as np

from agent.session import SessionLimits, SessionWatch, run_session
from transports.file_transport import CallScript, FileTransport
from transports.params import transport_params


def test_the_duration_limit_says_goodbye_before_ending_the_call(embedded):
    cfg = embedded.config
    script = CallScript([np.zeros(cfg.audio.in_sample_rate // 2, dtype=np.float32)], max_wait_s=60)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    limits = SessionLimits(idle_timeout_s=0, max_duration_s=1.0, check_every_s=0.1,
                           max_duration_goodbye="We have reached the time limit. Goodbye.")
    watch = SessionWatch()
    t0 = time.monotonic()
    asyncio.run(asyncio.wait_for(run_session(embedded.engines, transport, "limit", limits=limits, watch=watch), 30))
    ended = time.monotonic() - t0
    assert watch.ended_by and watch.ended_by.startswith("the call reached its maximum duration")
    goodbye_at = transport.output().first_voiced_after(t0 + 1.0)
    assert goodbye_at is not None, "no goodbye audio after the limit"
    voiced = [at for at, pcm in transport.output().chunks
              if at >= goodbye_at and int(np.abs(np.frombuffer(pcm, dtype="<i2")).max()) > 200]
    assert voiced[-1] - goodbye_at > 1.0, "the goodbye was cut short"
    assert ended < 15
    # the ended call is freed by reference counting (agent/call_teardown.py), not left for a full collection
    gc.disable()
    try:
        worker = weakref.ref(watch.worker)
        watch.worker = None
        assert worker() is None, "the ended call's worker is still alive (held in a reference cycle)"
    finally:
        gc.enable()
