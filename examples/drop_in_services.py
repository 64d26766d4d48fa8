"""Use Cadence's stages inside your own pipecat bot.

Cadence's ASR, LLM and TTS stages are ordinary pipecat services. This script builds a plain
pipecat pipeline from them and runs one turn from an audio file (no server, no browser):

    python examples/drop_in_services.py /usr/share/asterisk/sounds/en_US_f_Allison/agent-pass.wav
"""

from __future__ import annotations

import asyncio
import sys

from agent.config import load_config
from agent.llm_server import embedded_llama_server
from agent.pipeline import Engines
from agent.talk import format_turn, talk
from transports.audio_io import load_audio


async def main(path: str) -> None:
    config = load_config()
    with embedded_llama_server(config.llm.threads) as llm:
        # Engines = the shared, warmed models; agent.pipeline.build_worker wires them into
        # transport.input() -> VAD -> ASR -> user turn -> LLM -> TTS -> transport.output().
        engines = Engines.load(config, llm.base_url, llm.model_id)
        result = await talk(engines, [load_audio(path, config.audio.in_sample_rate)])
    print(format_turn(result.turns[0]))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
