"""Tunables of the phone transport (one dataclass, defaults that suit Twilio)."""

from __future__ import annotations

from dataclasses import dataclass

from transports.phone.protocol import MAX_PAYLOAD_BYTES


@dataclass
class PhoneOptions:
    path: str = "/phone/ws"
    # Audio kept ahead of the caller's ear: absorbs event-loop stalls; ``clear`` drops it on barge-in.
    lead_ms: float = 80.0
    # A ``mark`` every this much reply audio, plus one at the end of each reply.
    mark_every_ms: float = 500.0
    # Fast barge-in: caller audio this loud for this long while the bot plays clears the caller's
    # playout at once (``barge_in.py``). 0 leaves barge-in to the pipeline's VAD (vad.start_secs, slower).
    barge_in_start_ms: float = 60.0
    barge_in_min_level_dbfs: float = -40.0
    barge_in_snr_db: float = 12.0
    # After a fast barge-in, hold the bot's audio this long for the pipeline to confirm the
    # interruption; if it does not (a cough, a click), playback resumes.
    barge_in_hold_s: float = 0.6
    handshake_timeout_s: float = 5.0
    # No message at all for this long (Twilio sends media every 20 ms): the call is dropped.
    idle_timeout_s: float = 10.0
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    # When the bot ends the call, let the far end play what it holds (bounded) before closing.
    drain_timeout_s: float = 2.0
    # Finished calls kept for ``GET /phone/calls``.
    recent_calls: int = 50
    # Expose transcripts on ``GET /phone/calls`` (loopback/debug use; off hides the text).
    expose_transcripts: bool = True
    # Shared secret: when set, a call must carry it as ``?token=`` on the WebSocket URL or as a
    # ``<Parameter name="token">`` of the TwiML ``<Stream>`` (Twilio drops query strings), and
    # ``/phone/twiml`` is disabled (it would hand the secret to anyone who asks).
    token: str = ""
    # Non-empty: the account's Twilio auth token. ``/phone/ws`` and ``/phone/twiml`` then need a valid
    # ``X-Twilio-Signature`` (checked before the WebSocket upgrade); a signed call needs no token.
    twilio_auth_token: str = ""
    # Believe ``X-Forwarded-Host``/``-Proto`` (for the TwiML stream URL and signature URLs) only
    # behind a proxy that sets them; otherwise anyone could make /phone/twiml point elsewhere.
    trust_forwarded_headers: bool = False
    # Caller audio accepted at most this many times real time (plus ``input_burst_s`` of catch-up
    # after a network stall); the rest is dropped: a fast sender cannot load the ASR for everyone.
    max_input_rt_ratio: float = 1.5
    input_burst_s: float = 2.0
    # Caller audio enters the pipeline in frames of at least this many ms (Twilio sends 20 ms). Each frame
    # costs every processor and observer of the call a hand-off, so 40 ms halves that per-call CPU at the
    # price of up to 20 ms more before the last of the caller's speech reaches the VAD.
    input_frame_ms: float = 20.0
    # The bot's audio goes out in media messages of this many ms (a multiple of 10; Twilio plays any length).
    # Each message costs the call a serialization (resample, mu-law, base64, JSON), a pacing timer and a send:
    # 40 ms halves those per call-second of bot speech; the far end then holds up to 20 ms more after a clear.
    output_frame_ms: float = 20.0
    # Largest WebSocket frame accepted (a 200 ms media message is ~2.2 KB of JSON).
    max_frame_bytes: int = 16 * 1024
