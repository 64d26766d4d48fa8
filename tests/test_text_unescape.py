"""HTML character references in streamed LLM text are decoded before the TTS, also when a token splits them."""

from __future__ import annotations

from pipecat.frames.frames import LLMFullResponseEndFrame, LLMFullResponseStartFrame, LLMTextFrame
from pipecat.tests.utils import run_test

from agent.config import LLMConfig
from agent.llm_stage import CadenceLLMService
from agent.text_unescape import StreamUnescaper, unescape_references


def _stream(pieces: list[str]) -> str:
    u = StreamUnescaper()
    return "".join(u.feed(p) for p in pieces) + u.flush()


def test_complete_references_are_decoded_and_bare_ampersands_kept():
    assert unescape_references("that&#39;s it &amp; Q&amp;A &#x27;x&#x27; &quot;hi&quot;") == \
        "that's it & Q&A 'x' \"hi\""
    assert unescape_references("AT&T, R&D, salt & pepper, &copy without semicolon") == \
        "AT&T, R&D, salt & pepper, &copy without semicolon"
    assert unescape_references("&#0; &nosuchentity;") == "\ufffd &nosuchentity;"


def test_a_reference_split_across_pieces_is_held_then_decoded():
    assert _stream(["I think that&", "#", "39", ";s fine"]) == "I think that's fine"
    assert _stream(["Q&", "amp;A"]) == "Q&A"
    assert _stream(["Tom &", " Jerry"]) == "Tom & Jerry"  # ruled out by the next piece
    assert _stream(["ends with &"]) == "ends with &"  # the reply ended: flushed as written
    u = StreamUnescaper()
    assert u.feed("that&#3") == "that" and u.feed("9;s") == "'s"


async def test_the_llm_stage_decodes_what_it_pushes_downstream():
    llm = CadenceLLMService(LLMConfig(), "http://127.0.0.1:9/v1", "none")
    frames = [LLMFullResponseStartFrame(), LLMTextFrame("Sure, that&#"), LLMTextFrame("39;s fine"),
              LLMTextFrame(" &"), LLMFullResponseEndFrame()]
    down, _ = await run_test(llm, frames_to_send=frames)
    texts = [f.text for f in down if isinstance(f, LLMTextFrame)]
    assert "".join(texts) == "Sure, that's fine &" and all(texts), texts
    assert texts[:2] == ["Sure, that", "'s fine"]  # each piece out as soon as it is decodable
    kinds = [type(f) for f in down if isinstance(f, (LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame))]
    assert kinds[0] is LLMFullResponseStartFrame and kinds[-1] is LLMFullResponseEndFrame  # the held "&" before the end
