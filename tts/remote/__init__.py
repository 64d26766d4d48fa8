"""The TTS engine in its own process: one engine server, many session processes as clients.

``agent.engine_server`` hosts an engine (Kokoro's ``SynthesisBatcher`` and its phonemization) behind a
Unix socket; ``tts.remote.client.RemoteTTSEngine`` is a drop-in ``synthesize_stream`` engine for
``tts.service.CadenceTTSService``. ``transports.engine_link`` is the framing and the client connection.
"""
