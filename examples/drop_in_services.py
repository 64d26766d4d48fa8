"""Use Cadence's stages inside your own pipecat bot.

Cadence's ASR, LLM and TTS stages are ordinary pipecat services (``agent.stages``). This script
builds its own plain pipecat pipeline from them, plays an audio file into it as a caller's turn
(no server, no browser), prints what the bot said and writes its spoken reply:

    python examples/drop_in_services.py /usr/share/asterisk/sounds/en_US_f_Allison/agent-pass.wav --out reply.wav

The LLM is ``llm.base_url`` when set (``CADENCE_LLM__BASE_URL=http://host:8000/v1``, or
``--set llm.base_url=...``), else the embedded llama.cpp server.
"""

from __future__ import annotations

import argparse
import asyncio

from pipecat.frames.frames import BotStoppedSpeakingFrame, TTSTextFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.audio.vad_processor import VADProcessor

from agent.config import load_config
from agent.stages import Stages, llm_endpoint
from transports.audio_io import load_audio, write_wav
from transports.file_transport import CallScript, FileTransport, run_until_script_done
from transports.params import transport_params


class Reply(BaseObserver):
    """Collects the bot's spoken text; tells the script the answer is over."""

    def __init__(self, script: CallScript) -> None:
        super().__init__(observe_every_push=False)
        self.script = script
        self.text: list[str] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, TTSTextFrame):
            self.text.append(data.frame.text)
        elif isinstance(data.frame, BotStoppedSpeakingFrame) and self.text:
            asyncio.get_running_loop().call_later(0.5, self.script.turn_done.set)


async def main(args: argparse.Namespace) -> None:
    config = load_config(args.config, args.set)
    async with llm_endpoint(config) as (base_url, model):
        stages = await Stages.load(config, base_url, model)
        script = CallScript([load_audio(args.audio, config.audio.in_sample_rate)], max_wait_s=60)
        transport = FileTransport(transport_params(config.audio.in_sample_rate, config.audio.out_sample_rate),
                                  script)
        context = LLMContextAggregatorPair(LLMContext())
        pipeline = Pipeline([transport.input(), VADProcessor(vad_analyzer=stages.vad()), stages.stt(),
                             context.user(), stages.llm(), stages.tts(), transport.output(), context.assistant()])
        reply = Reply(script)
        worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=config.audio.in_sample_rate,
                                                                audio_out_sample_rate=config.audio.out_sample_rate),
                                observers=[reply], enable_rtvi=False, idle_timeout_secs=None)
        await run_until_script_done(worker, script)
    print(f"llm: {base_url}")
    print(f"bot said: {' '.join(reply.text)!r}")
    if args.out:
        audio = b"".join(pcm for _at, pcm in transport.output().chunks)
        write_wav(args.out, audio, config.audio.out_sample_rate)
        print(f"reply audio: {args.out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", help="the caller's turn (any audio file)")
    parser.add_argument("--out", help="write the bot's spoken reply here (WAV)")
    parser.add_argument("--config", help="Cadence TOML config")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    asyncio.run(main(parser.parse_args()))
