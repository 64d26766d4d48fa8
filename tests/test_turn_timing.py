"""Stage times of a turn with more than one transcript: never negative, timed by what reached the LLM."""

from __future__ import annotations

from agent.turn_observer import TurnTiming


def test_a_transcript_after_the_llm_started_times_nothing():
    turn = TurnTiming(index=0, vad_stop=10.2, vad_stop_secs=0.2)
    turn.add_transcript("Eight of spades.", 10.5)
    turn.llm_start, turn.llm_first_token, turn.tts_first_audio, turn.first_audio_out = 10.6, 10.8, 11.0, 11.1
    turn.add_transcript("four of clubs.", 11.4)  # landed after the request: it did not contribute
    stages = turn.stages_ms()
    assert turn.transcript_text == "Eight of spades. four of clubs."
    assert turn.late_transcripts == 1
    assert round(stages["eos_to_transcript"]) == 500
    assert round(stages["transcript_to_llm_first_token"]) == 300
    assert all(v >= 0 for v in stages.values()), stages


def test_every_transcript_before_the_request_counts_and_the_last_one_times_the_turn():
    turn = TurnTiming(index=0, vad_stop=10.2, vad_stop_secs=0.2)
    turn.add_transcript("Eight of spades,", 9.0)
    turn.add_transcript("four of clubs.", 10.4)
    turn.llm_start, turn.llm_first_token = 10.5, 10.7
    assert turn.late_transcripts == 0
    assert round(turn.stages_ms()["eos_to_transcript"]) == 400
    assert round(turn.stages_ms()["transcript_to_llm_first_token"]) == 300


def test_speech_after_the_request_started_does_not_move_the_end_of_speech():
    # run 18 (phone callers on the H200): eos_to_transcript -2,551 ms, the caller's next words ended
    # 2.5 s after the transcript that reached the LLM and were taken as this turn's end of speech
    turn = TurnTiming(index=0)
    turn.add_vad_stop(10.2, 0.2)
    turn.add_transcript("t3904 t3904", 10.4)
    turn.llm_start, turn.llm_first_token = 10.5, 10.7
    turn.add_vad_stop(13.0, 0.2)
    assert turn.end_of_speech == 10.0
    assert all(v >= 0 for v in turn.stages_ms().values())
    early = TurnTiming(index=1)
    early.add_vad_stop(5.0, 0.2)
    early.add_vad_stop(6.0, 0.2)  # a pause inside the turn, before any request: the later stop counts
    assert early.end_of_speech == 5.8


def test_a_later_segment_the_asr_heard_as_silence_counts_from_the_end_of_speech():
    # run 40 (phone callers on the H200): eos_to_transcript -465 ms. The first segment's final came,
    # the caller spoke on, and that segment's final was empty, so no newer transcript moved the time;
    # the turn's words were ready when the caller's speech ended.
    turn = TurnTiming(index=0)
    turn.add_vad_stop(10.2, 0.2)
    turn.add_transcript("t3904 t3904", 10.4)
    turn.add_vad_stop(11.065, 0.2)  # end of speech 10.865, after the transcript (no request yet)
    turn.llm_start, turn.llm_first_token = 11.5, 11.9
    stages = turn.stages_ms()
    assert round(stages["eos_to_transcript"]) == 0
    assert round(stages["transcript_to_llm_first_token"]) == round(stages["eos_to_llm_first_token"]) == 1035
    assert all(v >= 0 for v in stages.values()), stages


def test_a_segment_with_no_words_times_the_transcript_of_its_turn():
    """A held turn (vad.turn_min_quiet_secs) the caller's noise reopened: the VAD stops again, the segmented ASR
    pushes an empty transcript for it, and the turn ends on the first segment's words. Timed by the first
    transcript alone, the end of speech (the noise's VAD stop) would come after it: a negative stage."""
    turn = TurnTiming(index=0)
    turn.add_vad_stop(10.2, 0.2)
    turn.add_transcript("You are the only person in this conference.", 10.3)
    turn.add_vad_stop(10.9, 0.2)  # the noise
    turn.add_transcript("", 11.0)
    turn.llm_start, turn.llm_first_token = 11.4, 11.5
    assert turn.transcript_text == "You are the only person in this conference." and turn.late_transcripts == 0
    assert round(turn.stages_ms()["eos_to_transcript"]) == 300
    assert all(v >= 0 for v in turn.stages_ms().values()), turn.stages_ms()
    turn.add_transcript("", 12.0)  # after the request: times nothing, and no words were late
    assert turn.transcript == 11.0 and turn.late_transcripts == 0


def test_the_cut_reply_of_the_previous_turn_does_not_time_the_next_one():
    """CI at a52a750: a joined clip's first sentence got a reply whose first tokens reached the TTS just after the
    caller went on; the new turn took them as its own first token, 1.49 s before its transcript (a negative
    stage). A turn takes bot frames only after its own reply starts."""
    from types import SimpleNamespace

    from pipecat.frames.frames import (
        BotStoppedSpeakingFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        UserStartedSpeakingFrame,
        UserStoppedSpeakingFrame,
    )
    from pipecat.observers.base_observer import FramePushed
    from pipecat.processors.frame_processor import FrameDirection

    from agent.turn_observer import TurnObserver

    source = SimpleNamespace(get_clock=lambda: SimpleNamespace(_time=0))
    observer = TurnObserver()

    def push(frame, at: float) -> None:
        observer._observe(FramePushed(source, source, frame, FrameDirection.DOWNSTREAM, int(at * 1e9)))

    push(UserStartedSpeakingFrame(), 1.0)
    push(TranscriptionFrame("No more messages.", "caller", "t"), 2.0)
    push(UserStoppedSpeakingFrame(), 2.2)
    push(LLMFullResponseStartFrame(), 2.2)
    push(UserStartedSpeakingFrame(), 2.8)  # the caller goes on before the reply's first token
    for frame in (LLMTextFrame("I"), TTSAudioRawFrame(b"\0\0" * 160, 16000, 1), LLMFullResponseEndFrame(),
                  BotStoppedSpeakingFrame()):
        push(frame, 2.81)  # the cut reply's tail, after the new turn opened
    push(TranscriptionFrame("Thank you for your patience.", "caller", "t"), 4.3)
    push(UserStoppedSpeakingFrame(), 4.5)
    push(LLMFullResponseStartFrame(), 4.5)
    push(LLMTextFrame("Sure."), 4.9)
    second = observer.turns[1]
    assert second.transcript_text == "Thank you for your patience."
    assert second.llm_first_token == 4.9 and second.reply_text == "Sure." and second.tts_first_audio is None
    assert not second.llm_done and second.llm_requests == 1
    assert all(v >= 0 for v in second.stages_ms().values()), second.stages_ms()
