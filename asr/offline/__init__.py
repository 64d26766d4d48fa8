"""Offline (batch) transcription: files in, transcripts out, throughput first.

One request or one corpus flows the same way: ``decode`` (native, parallel by time range)
-> ``plan`` (skip silence, cut long audio into windows) -> ``window_batcher`` (windows of every
request batched by length on one engine) -> ``stitch`` (words back onto the file's clock)
-> ``formats`` (json, text, srt, vtt, verbose_json), all driven by ``transcriber``. ``server``
puts an OpenAI-compatible HTTP API in front; ``ray_job`` spreads a corpus over a Ray cluster;
``cadence transcribe`` (``agent.cli_transcribe``) runs ``transcriber.transcribe_corpus`` in-process.
"""
