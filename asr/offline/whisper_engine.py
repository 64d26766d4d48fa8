"""The embedded CPU engine: faster-whisper (Whisper tiny.en, int8) on batches of windows.

Windows of many requests go through one CTranslate2 ``generate`` call (faster-whisper's
batched forward), with word timestamps so ``stitch`` can place every word. Windows the
model judges to be no speech (Whisper's own rule: no-speech probability above 0.6 and
mean log-probability below -1) yield no words, which keeps noise from turning into text.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from asr.offline.plan import PlanOptions
from asr.offline.results import Word
from asr.offline.window_engine import EngineSpec, spec_plan

NO_SPEECH_PROB = 0.6
LOGPROB_FLOOR = -1.0


class WhisperWindowEngine:
    sample_rate = 16000

    def __init__(self, model: Any, name: str, max_batch: int, plan: PlanOptions) -> None:
        from faster_whisper.transcribe import BatchedInferencePipeline

        self.model = model
        self.name = name
        self.max_batch = max_batch
        self.plan = plan
        self.languages = None if model.model.is_multilingual else frozenset({"en"})
        self._pipeline = BatchedInferencePipeline(model)
        self._tokenizers: dict[str, Any] = {}

    @classmethod
    def load(cls, spec: EngineSpec) -> WhisperWindowEngine:
        from asr.whisper_model import shared_whisper_model

        if not spec.model:
            raise ValueError("the whisper engine needs a model directory (the runtime resolves the embedded one)")
        model = shared_whisper_model(spec.model, spec.device, spec.compute_type)
        name = spec.name or "whisper-" + os.path.basename(os.path.normpath(spec.model))
        plan = spec_plan(spec, 30.0, longest_s=30.0)
        return cls(model, name, spec.max_batch or 8, plan)

    def _tokenizer(self, language: str) -> Any:
        from faster_whisper.tokenizer import Tokenizer

        if language not in self._tokenizers:
            self._tokenizers[language] = Tokenizer(
                self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe", language=language)
        return self._tokenizers[language]

    def _options(self, multilingual: bool) -> Any:
        from faster_whisper.transcribe import TranscriptionOptions

        return TranscriptionOptions(
            beam_size=1, best_of=1, patience=1.0, length_penalty=1.0, repetition_penalty=1.0,
            no_repeat_ngram_size=0, log_prob_threshold=LOGPROB_FLOOR, no_speech_threshold=NO_SPEECH_PROB,
            compression_ratio_threshold=2.4, condition_on_previous_text=False, prompt_reset_on_temperature=0.5,
            temperatures=[0.0], initial_prompt=None, prefix=None, suppress_blank=True, suppress_tokens=[-1],
            without_timestamps=True, max_initial_timestamp=0.0, word_timestamps=True,
            prepend_punctuations="\"'“¿([{-", append_punctuations="\"'.。,，!！?？:：”)]}、",
            multilingual=multilingual, max_new_tokens=None, clip_timestamps="0",
            hallucination_silence_threshold=None, hotwords=None,
        )

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]:
        from faster_whisper.audio import pad_or_trim

        if not windows:
            return []
        multilingual = self.model.model.is_multilingual and language is None
        tokenizer = self._tokenizer(language or "en")
        features = np.stack([pad_or_trim(self.model.feature_extractor(w)[..., :-1]) for w in windows])
        meta = [{"offset": 0.0, "duration": len(w) / self.sample_rate, "segments": []} for w in windows]
        outputs = self._pipeline.forward(features, tokenizer, meta, self._options(multilingual))
        results: list[list[Word]] = []
        for segments in outputs:
            words: list[Word] = []
            for seg in segments:
                if seg["no_speech_prob"] > NO_SPEECH_PROB and seg["avg_logprob"] < LOGPROB_FLOOR:
                    continue
                words.extend(Word(float(w["start"]), float(w["end"]), w["word"]) for w in seg.get("words", []))
            results.append(words)
        return results
