"""Phone callers over a Twilio Media Streams-style WebSocket (8 kHz mu-law).

``agent.phone_routes.install`` adds the routes to a Cadence server (the runtime registers them;
this package never imports it); ``PhoneTransport`` is the pipecat transport; ``PHONE_STATS`` (``stats``) carries the output lateness figures for the exporter.
"""
