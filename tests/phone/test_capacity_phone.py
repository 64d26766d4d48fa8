"""``cadence capacity --transport phone`` against a real ``cadence serve`` (embedded models) on loopback:
synthetic callers speak recorded prompts over ``/phone/ws`` in real time and judge what comes back."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from agent.capacity.corpus import phone_prompts, read_ulaw_pack, recorded_prompts, write_ulaw_pack
from agent.capacity.phone_caller import (
    FRAME_S,
    LONGEST_REPLY_S,
    PhoneCaller,
    PhoneCallRecord,
    Prompt,
    audible,
)
from agent.capacity.phone_ramp import describe_phone, judge_phone_level, phone_turns
from agent.config import BudgetsConfig
from agent.turn_ends import BY
from testkit.servers import ROOT


def test_two_phone_callers_against_a_real_server(tmp_path, phone_server):
    pack = write_ulaw_pack(tmp_path / "prompts.npz", recorded_prompts()[:40])
    srv = phone_server  # two callers at most, no budget gate (tests/phone/conftest.py)
    before = {c["stream_sid"] for c in __import__("httpx").get(f"{srv['url']}/phone/calls").json()["recent"]}
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "capacity", "--transport", "phone", "--url", srv["url"],
         "--prompts", str(pack), "--levels", "2", "--warmup", "2", "--hold", "14", "--max-wait", "20",
         "--all-levels", "--records", "--out-dir", str(tmp_path / "out"), "--write-config", str(tmp_path / "cap.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    took = time.monotonic() - t0
    calls = __import__("httpx").get(f"{srv['url']}/phone/calls").json()
    calls["recent"] = [c for c in calls["recent"] if c["stream_sid"] not in before]  # this run's calls only
    print(out.stdout[-2000:], f"\ncapacity run: {took:.0f} s")
    result = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert (tmp_path / "out" / "capacity.png").stat().st_size > 10_000
    assert result["transport"] == "phone" and result["commit"] and result["prompts"]["count"] == 40
    level = result["levels"][0]
    assert level["concurrency"] == 2 and level["transport"] == "phone"
    assert level["turns"] >= 2 and level["unanswered"] == 0, level["reasons"]
    assert level["answered_once"] + level["answered_more"] == level["turns"]
    assert 0 < level["first_audio_p50_ms"] <= level["first_audio_p99_ms"] < 20_000
    # the server's windows were reset at the hold and read at its end
    assert level["stage_tails"]["asr_final"] is not None and level["stage_tails"]["first_audio"] is not None
    assert 0 < level["stage_medians"]["first_audio"] <= level["stage_tails"]["first_audio"]
    # how late the VAD heard the callers' audio (socket arrival -> analyzed): measured, and far under a second
    assert 0 < level["stage_medians"]["phone_input_lag"] <= level["stage_tails"]["phone_input_lag"] < 1000
    # the hold's server CPU by process group: this one process serves the calls, its llama.cpp child the LLM
    cores = level["cpu_cores"]
    assert set(cores) == {"workers", "engines", "llm", "other"} and cores["workers"] > 0.02 and cores["llm"] > 0.0
    # the hold's server counters: at least one chat completion per reply, a turn or more answered (a turn is
    # counted when the caller's next one starts: a 10 s hold saw none on a loaded CI box, its LLM 5 s to a token)
    counts = level["counts"]
    # (``turns`` is counted when a caller's next turn starts, which a slow LLM can push past the hold: not asserted)
    assert counts["llm_requests"] >= counts["replies"] >= 1, counts
    # and what ended the turns: smart-turn's verdict, its silence fallback or the finished-sentence rule
    assert {"ends_model", "ends_silence", "ends_finished_text", "ends_timeout"} <= set(counts), counts
    assert counts["ends_model"] + counts["ends_silence"] + counts["ends_finished_text"] >= 1, counts
    # both callers were real calls on the server; nothing is left connected
    assert len(calls["recent"]) >= 2 and not calls["active"]
    assert len({c["stream_sid"] for c in calls["recent"]}) >= 2
    assert any(t["transcript"] for c in calls["recent"] for t in c["turns"])  # the prompts were heard
    # --records: the level's caller timelines, read back into phone_turns as the judge read them
    import gzip

    with gzip.open(tmp_path / "out" / "records-2.json.gz", "rt") as f:
        saved = json.load(f)
    start, end = saved["hold"]
    assert len(saved["callers"]) == 2 and start < end
    judged = [t for r in saved["callers"]
              for t in phone_turns(PhoneCallRecord(**{k: [tuple(x) for x in v] if k in ("chunks", "marks") else v
                                                      for k, v in r.items()}))
              if start <= t.eos <= end]
    assert len(judged) == level["turns"] and all(t.first_audio_ms is not None for t in judged)
    # each judged turn names the prompt the caller spoke (bench/first_audio_by_prompt.py groups by it)
    spoken = {name for r in saved["callers"] for name in r["utterances"]}
    assert all(t.prompt in spoken for t in judged)
    assert sorted(d["prompt"] for d in level["turn_details"]) == sorted(t.prompt for t in judged)
    # each answered turn's reply named what ended the turn (the stop strategy's note -> the phone line's marks)
    assert all(d["ended_by"] in BY for d in level["turn_details"] if d["answered"]), [
        (d["prompt"], d["ended_by"]) for d in level["turn_details"]]
    assert level["fallback_turns"] == sum(d["ended_by"] == "silence" for d in level["turn_details"])
    assert level["first_audio_no_fallback_p50_ms"] is not None or level["fallback_turns"] == level["turns"]


def test_prompt_pack_round_trip_and_end_of_speech(tmp_path):
    paths = recorded_prompts()[:5]
    pack = write_ulaw_pack(tmp_path / "p.npz", paths)
    loaded = read_ulaw_pack(pack)
    assert [n for n, _ in loaded] == [p.stem for p in paths]
    prompts = phone_prompts(pack)
    assert len({p.name for p in prompts}) == 5
    p = prompts[0]
    assert 0 <= p.first_voiced < p.last_voiced < len(p.payloads)
    ulaw = b"".join(__import__("base64").b64decode(x) for x in p.payloads)
    frames = [ulaw[i:i + 160] for i in range(0, len(ulaw), 160)]
    assert audible(frames[p.last_voiced]) and not any(audible(f) for f in frames[p.last_voiced + 1:])


def _record(eos: float, chunks, marks) -> PhoneCallRecord:
    rec = PhoneCallRecord(0, speech_starts=[eos - 1.0], speech_ends=[eos])
    rec.chunks = [(at, FRAME_S, True) for at in chunks]
    rec.marks = marks
    return rec


def test_judge_counts_replies_first_audio_and_dry_player():
    paced = [10.3 + 0.02 * i for i in range(50)]  # first audio 300 ms after the last voiced frame
    once = _record(10.0, paced, [(11.0, "r1-500"), (11.3, "r1-1000-end")])
    twice = _record(10.0, paced + [13.0 + 0.02 * i for i in range(20)], [(11.0, "r1-1000-end"), (13.4, "r2-400-end")])
    gap = _record(10.0, paced[:25] + [p + 0.5 for p in paced[25:]], [(11.5, "r1-1000-end")])
    turns = phone_turns(once)
    assert len(turns) == 1 and abs(turns[0].first_audio_ms - 300.0) < 1e-6 and turns[0].replies == 1
    assert phone_turns(twice)[0].replies == 2
    assert max(phone_turns(gap)[0].lateness_ms) > 400  # the player ran dry for half a second
    scrape = {"tails": {"output_rt_ratio": 1.5, "asr_final": 100.0}, "breaches": [], "gpu_memory_gib": {"llm": 3.0}}
    ok = judge_phone_level(1, [once], 0.0, 100.0, BudgetsConfig(), scrape)
    assert ok.passed and ok.answered_once == 1 and ok.gpu_memory_gib == {"llm": 3.0}
    bad = judge_phone_level(3, [once, twice, gap], 0.0, 100.0, BudgetsConfig(), scrape)
    assert not bad.passed and bad.answered_more == 1
    assert any("answered more than once" in r for r in bad.reasons)
    assert any("ran dry" in r for r in bad.reasons)
    slow = judge_phone_level(1, [once], 0.0, 100.0, BudgetsConfig(), {**scrape, "tails": {"output_rt_ratio": 1.1}})
    assert any("server delivery p1 1.10x < 1.20x" in r for r in slow.reasons)


def test_turns_held_for_the_silence_fallback_are_named_and_judged_apart():
    """A reply's marks name what ended its turn; ``budgets.first_audio_excludes_fallback`` judges the p99 over
    the turns the turn model did not hold for its silence fallback, and every turn's figures stay reported."""
    paced = [10.3 + 0.02 * i for i in range(50)]
    quick = _record(10.0, paced, [(11.0, "r1-model-500"), (11.3, "r1-model-1000-end")])  # 300 ms
    held = _record(10.0, [p + 0.8 for p in paced], [(11.8, "r1-silence-500"), (12.1, "r1-silence-1000-end")])
    assert [phone_turns(r)[0].ended_by for r in (quick, held)] == ["model", "silence"]
    assert phone_turns(quick)[0].replies == 1  # the name is one reply, as before
    scrape = {"tails": {"output_rt_ratio": 1.5}, "breaches": [], "gpu_memory_gib": {}}
    budgets = BudgetsConfig(first_audio_p99_ms=700.0)
    every = judge_phone_level(2, [quick, held], 0.0, 100.0, budgets, scrape)
    assert every.fallback_turns == 1 and round(every.first_audio_no_fallback_p99_ms) == 300
    assert round(every.first_audio_p99_ms) > 1000 and not every.passed
    assert any(r.startswith("first audio p99 1") for r in every.reasons), every.reasons
    budgets.first_audio_excludes_fallback = True
    machine = judge_phone_level(2, [quick, held], 0.0, 100.0, budgets, scrape)
    assert machine.passed, machine.reasons
    assert "without the 1 turns held for the silence fallback: p50 300 ms" in describe_phone(machine)
    slow = _record(10.0, [p + 0.5 for p in paced], [(11.5, "r1-model-500"), (11.8, "r1-model-1000-end")])
    late = judge_phone_level(3, [quick, held, slow], 0.0, 100.0, budgets, scrape)
    assert any("(the turns not held for the silence fallback) 79" in r for r in late.reasons), late.reasons
    # a server whose marks name no turn end: the budget cannot be judged that way, and says so
    unnamed = _record(10.0, paced, [(11.0, "r1-500"), (11.3, "r1-1000-end")])
    old = judge_phone_level(1, [unnamed], 0.0, 100.0, budgets, scrape)
    assert not old.passed and any("cannot be judged" in r for r in old.reasons)
    assert old.first_audio_no_fallback_p50_ms is None


def test_the_rest_of_a_stalled_reply_does_not_answer_the_next_prompt():
    """Reply r1 to prompt 1 stalls longer than the caller's pause, the caller says prompt 2, then r1's rest
    arrives 50 ms after prompt 2's end: that is not prompt 2's answer (r2, 700 ms after it, is)."""
    rec = PhoneCallRecord(0, speech_starts=[0.0, 2.7], speech_ends=[1.0, 3.5])
    r1_head = [1.4 + 0.02 * i for i in range(20)]  # 1.40-1.78 s
    r1_tail = [3.55 + 0.02 * i for i in range(10)]  # after the stall: 3.55-3.73 s
    r2 = [4.2 + 0.02 * i for i in range(30)]
    rec.chunks = [(at, FRAME_S, True) for at in r1_head + r1_tail + r2]
    rec.marks = [(1.79, "r1-400"), (3.75, "r1-600-end"), (4.81, "r2-600-end")]
    first, second = phone_turns(rec)
    assert first.replies == 1 and abs(first.first_audio_ms - 400.0) < 1e-6
    assert second.replies == 1 and abs(second.first_audio_ms - 700.0) < 1e-6, second
    assert abs(second.audio_s - 30 * FRAME_S) < 1e-9
    # a server that names no replies: every chunk after the prompt counts, as before
    rec.marks = []
    assert abs(phone_turns(rec)[1].first_audio_ms - 50.0) < 1e-6


def test_a_reply_cut_by_a_clear_before_its_next_mark_stays_its_own():
    """The caller talks over r1: its chunks after r1's last mark are cleared before any r1 mark follows. They
    are r1's, not the next reply's (r2's first mark is the next to arrive), so prompt 2 is answered by r2
    (timeline of a CPU run at 2 callers, --max-wait 2.5, that counted such a prompt unanswered)."""
    rec = PhoneCallRecord(0, speech_starts=[0.0, 2.28, 7.12], speech_ends=[1.0, 4.60, 8.72])
    r1 = [1.11 + 0.02 * i for i in range(60)]  # 1.11-2.29 s; marks at 1.51 and 2.01, cleared at 2.32
    r2 = [5.63 + 0.02 * i for i in range(78)]  # 5.63-7.17 s; marks at 6.02, 6.53, 7.02, cleared at 7.20
    r3 = [10.54 + 0.02 * i for i in range(36)]
    rec.chunks = [(at, FRAME_S, True) for at in r1 + r2 + r3]
    rec.marks = [(1.51, "r0-500"), (2.01, "r0-1000"), (6.02, "r1-500"), (6.53, "r1-1000"), (7.02, "r1-1500"),
                 (10.94, "r2-500"), (11.30, "r2-720-end")]
    rec.clears = [2.32, 7.20]
    turns = phone_turns(rec)
    assert [t.replies for t in turns] == [1, 1, 1]
    assert [round(t.first_audio_ms) for t in turns] == [110, 1030, 1820]
    heard = sum(at < 7.12 for at in r2) * FRAME_S  # r2 until prompt 3 began, nothing of r1
    assert abs(turns[1].audio_s - heard) < 1e-9
    # a reply cut before its first mark is a reply of its own, not the previous one's nor the next one's
    rec.marks = [(1.51, "r0-500"), (2.30, "r0-1180-end"), (10.94, "r2-500"), (11.30, "r2-720-end")]
    rec.clears = [7.20]
    turns = phone_turns(rec)
    assert [round(t.first_audio_ms) for t in turns] == [110, 1030, 1820] and turns[1].replies == 1


def test_caller_waits_out_a_long_reply_but_not_a_missing_one():
    """``max_wait_s`` ends a wait for a reply that never came; a reply still playing is heard out (runs 58-59:
    7.5 s replies cut by an 8 s wait were counted as barge-ins)."""
    c = PhoneCaller("ws://x", 0, [], stop_at=100.0, max_wait_s=8.0, pause_s=0.6)
    c._eos = 10.0
    assert not c._ready_to_speak(17.9) and c._ready_to_speak(18.0)  # nothing came: speak after 8 s
    c._last_arrival, c._play_end = 16.0, 19.0  # the reply began at 16 s and plays until 19 s
    assert not c._ready_to_speak(18.5) and not c._ready_to_speak(19.5) and c._ready_to_speak(19.6)
    c._play_end = 1000.0  # a stream that never ends does not hold the level: max_wait + LONGEST_REPLY_S at most
    assert not c._ready_to_speak(10.0 + 8.0 + LONGEST_REPLY_S - 0.1) and c._ready_to_speak(10.0 + 8.0 + LONGEST_REPLY_S)


def test_pause_jitter_draws_each_turns_pause_from_the_callers_own_seed():
    """``--pause-jitter``: a pause of 0.6 s plus a uniform draw per turn, the same draws for the same seed (a rerun
    deals the same load), different ones across callers; 0 keeps the fixed 0.6 s of every earlier run."""
    fixed = PhoneCaller("ws://x", 0, [], stop_at=100.0, pause_s=0.6)
    assert {fixed._next_pause() for _ in range(20)} == {0.6}
    a = PhoneCaller("ws://x", 0, [], stop_at=100.0, pause_s=0.6, pause_jitter_s=2.0, seed=7)
    b = PhoneCaller("ws://x", 0, [], stop_at=100.0, pause_s=0.6, pause_jitter_s=2.0, seed=7)
    other = PhoneCaller("ws://x", 1, [], stop_at=100.0, pause_s=0.6, pause_jitter_s=2.0, seed=8)
    draws = [a._next_pause() for _ in range(50)]
    assert draws == [b._next_pause() for _ in range(50)] and draws != [other._next_pause() for _ in range(50)]
    assert all(0.6 <= d <= 2.6 for d in draws) and max(draws) - min(draws) > 1.0
    a._eos, a._last_arrival, a._play_end, a._pause = 10.0, 11.0, 15.0, 1.7  # this turn's draw: 1.7 s after the reply
    assert not a._ready_to_speak(16.6) and a._ready_to_speak(16.7)
    prompt = Prompt.from_pcm8k("p", (b"\x00\x40" * 800))  # 0.1 s of a loud constant: one voiced prompt
    a.prompts, a._eos = [prompt], None
    before = a._pause
    assert a.frame(0.0) is not None and a._pause != before  # a new prompt draws the pause that follows its reply


def test_turn_waves_say_whether_the_slowest_turns_came_in_a_burst():
    from agent.capacity.waves import turn_waves

    steady = [{"at_s": i * 0.5, "first_audio_ms": 500.0} for i in range(40)]  # 4 turns per 2 s bin
    burst = [{"at_s": 8.0 + i * 0.05, "first_audio_ms": 1500.0 + i} for i in range(20)]  # 20 more in 8-9 s
    waves = turn_waves(steady + burst)
    assert waves["peak_per_bin"] == 24 and waves["mean_per_bin"] == 6.0 and waves["peak_to_mean"] == 4.0
    assert waves["tail_in_peaks"] == 1.0  # the slowest 5% are burst turns
    even = turn_waves(steady)
    assert even["peak_to_mean"] == 1.0 and even["tail_in_peaks"] == 0.0
    assert turn_waves([]) == {}


def test_server_cpu_groups_processes_by_what_they_run():
    from agent.capacity.server_cpu import ServerCpu, _group

    assert _group(["python", "-m", "agent.cli", "serve"], {7}, 7) == "workers"
    assert _group(["python", "-m", "agent.engine_server", "--socket", "x"], {7}, 8) == "engines"
    assert _group(["python", "-m", "transformers.cli.transformers", "serve"], {7}, 9) == "llm"
    assert _group(["python", "-m", "agent.llama_serve"], {7}, 9) == "llm"
    assert _group(["python", "-m", "agent.cli", "serve", "--workers", "8"], {7}, 1) == "other"  # the parent
    before = (10.0, {"workers": 1.0, "engines": 0.5, "llm": 0.0, "other": 0.1})
    after = (12.0, {"workers": 4.0, "engines": 1.5, "llm": 0.2, "other": 0.1})
    assert ServerCpu.cores(before, after) == {"workers": 1.5, "engines": 0.5, "llm": 0.1, "other": 0.0}
    assert ServerCpu.from_health({"pid": 2**22 + 12345}) is None  # not a process on this machine


def test_prompt_without_speech_is_refused():
    try:
        Prompt.from_ulaw("silence", b"\xff" * 1600)
    except ValueError as exc:
        assert "no audible frame" in str(exc)
    else:
        raise AssertionError("a silent prompt was accepted")
