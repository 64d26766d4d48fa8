"""Cadence's transports (phone, WebRTC, files) and what they share."""

# The metadata key under which a transport stamps an input audio frame with its arrival (``time.monotonic()``);
# ``agent.timed_vad`` reports how late the VAD analyzed it.
ARRIVED = "cadence_arrived"
