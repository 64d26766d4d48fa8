"""Phone callers over a Twilio Media Streams-style WebSocket (8 kHz mu-law).

``server_ext.install`` adds the routes to a Cadence server; ``PhoneTransport`` is the pipecat
transport; ``PHONE_STATS`` (``stats``) carries the output lateness figures for the exporter.
"""
