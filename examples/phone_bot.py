"""A phone bot: Cadence's cascade answering calls from Twilio (or any Twilio-compatible media stream).

Run it, try it with a local call, then point a real phone number at it.

1. Start the bot (embedded CPU models; nothing is downloaded)::

       python examples/phone_bot.py --port 7860

   (``cadence serve --bot examples/phone_bot.py`` serves the same bot: the ``bot`` below.)

   It serves ``GET /phone/ws`` (the media stream), ``POST /phone/twiml`` (TwiML for the voice
   webhook) and ``GET /phone/calls`` (live and recent calls, with transcripts and pacing figures),
   next to the WebRTC page on ``/``.

2. Try it without a phone provider: place a local call that speaks a WAV file and record the
   bot's answer (any WAV; Asterisk prompts are real telephone speech)::

       python examples/phone_bot.py --port 7860 --try-call \\
           /usr/share/asterisk/sounds/en_US_f_Allison/agent-pass.wav --reply-wav reply.wav

3. Give it a public TLS address (the provider only connects to ``wss://``), e.g. one of::

       ngrok http 7860                                 # -> https://<id>.ngrok.app
       cloudflared tunnel --url http://localhost:7860  # -> https://<id>.trycloudflare.com

4. Point your number at it. Twilio console -> Phone Numbers -> your number -> Voice
   configuration -> "A call comes in": Webhook ``https://<public host>/phone/twiml`` (HTTP POST).
   Or paste this TwiML into a TwiML Bin and select the bin (add the ``<Parameter>`` when you
   start the bot with ``--token``; Twilio drops query strings from stream URLs)::

       <?xml version="1.0" encoding="UTF-8"?>
       <Response>
         <Connect>
           <Stream url="wss://<public host>/phone/ws">
             <Parameter name="token" value="<your token>" />
           </Stream>
         </Connect>
       </Response>

   ``<Connect><Stream>`` makes the stream bidirectional (the bot talks back; ``<Start><Stream>``
   would only listen). Other providers work if they offer the same protocol: a bidirectional
   WebSocket stream of 8 kHz mu-law (PCMU) JSON ``media`` messages with ``mark`` and ``clear``
   (for example SignalWire's ``<Connect><Stream>``; Telnyx media streaming in bidirectional RTP
   mode with PCMU). The bot refuses other formats with close code 1003.

5. Call the number. Speak over the bot to interrupt it: it stops within ~60 ms (``clear``).
   ``GET /phone/calls`` shows each turn's transcript, reply and stage latencies, the output's
   chunk lateness and what the caller actually heard (from the echoed ``mark`` messages).
"""

from __future__ import annotations

import argparse
import asyncio
import wave
from pathlib import Path

from agent.bot import Bot
from agent.config import load_config

bot = Bot(
    "You are Cadence, a friendly voice assistant answering the phone. Answer in one or two short spoken "
    "sentences. Use plain words, no lists, no markdown, no emoji, no code.",
    greeting="Hello, this is Cadence. How can I help?",
    hang_up_tool=True,
)

TWIML = """<?xml version="1.0" encoding="UTF-8"?>
<Response>
  <Connect>
    {stream}
  </Connect>
</Response>"""


def read_wav_8k(path: Path) -> bytes:
    """Any WAV -> 8 kHz mono 16-bit PCM (what a phone line carries)."""
    from transports.audio_io import load_audio, to_pcm16

    with wave.open(str(path)) as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (8000, 1, 2):
            return w.readframes(w.getnframes())
    return to_pcm16(load_audio(path, 8000))


async def try_call(url: str, wav: Path, reply_wav: Path | None, token: str = "") -> bool:
    """One local call, as Twilio would place it: hear the greeting, speak the file, wait for the answer."""
    from transports.audio_io import write_wav
    from transports.phone.loopback_caller import LoopbackCaller

    caller = LoopbackCaller(url.replace("http://", "ws://") + "/phone/ws",
                            custom_parameters={"token": token} if token else None)
    await caller.connect()
    greeting = await caller.wait_reply(0.0, timeout_s=30)
    if greeting is not None:
        print(f"greeting heard: {greeting[1] - greeting[0]:.1f} s")
    spoken = await caller.say(read_wav_8k(wav))
    reply = await caller.wait_reply(spoken.last, timeout_s=60)
    await caller.hang_up()
    if reply is None:
        print("the bot did not answer")
        return False
    first, end = reply
    print(f"first bot audio {(first - spoken.last) * 1000:.0f} ms after the end of speech; "
          f"answer {end - first:.1f} s")
    if reply_wav:
        write_wav(reply_wav, caller.audio_between(first - 0.1, end + 0.1), 8000)
        print(f"the bot's answer as the caller heard it: {reply_wav}")
    return True


async def serve(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    config.server.host, config.server.port = args.host, args.port
    config.phone.token = args.token or config.phone.token
    ready, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(bot.serve(config, ready, stop))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        await task  # start-up failed: raise its error
        return 1
    url = f"http://{config.server.host}:{config.server.port}"
    stream = '<Stream url="wss://<public host>/phone/ws" />'
    if config.phone.token:
        stream = (f'<Stream url="wss://<public host>/phone/ws">\n      <Parameter name="token" '
                  f'value="{config.phone.token}" />\n    </Stream>')
    print(f"\nphone bot ready: media stream on {url.replace('http', 'ws')}/phone/ws")
    print(f"TwiML for your number (replace <public host> with your tunnel's host):\n"
          f"{TWIML.format(stream=stream)}\n", flush=True)
    answered = True
    if args.try_call:
        try:
            answered = await try_call(url, args.try_call, args.reply_wav, config.phone.token)
        finally:
            stop.set()
    await task
    return 0 if answered else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="listen address (0.0.0.0 behind a tunnel on another box)")
    parser.add_argument("--port", type=int, default=7860, help="listen port (0: any free port)")
    parser.add_argument("--token", default="", help="shared secret every call must carry (see step 4)")
    parser.add_argument("--config", help="Cadence TOML config")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--try-call", type=Path, metavar="WAV", help="place one local call with this audio, then exit")
    parser.add_argument("--reply-wav", type=Path, help="with --try-call: save the bot's answer here")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    from agent.cli import setup_logging

    setup_logging(args.log_level)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
