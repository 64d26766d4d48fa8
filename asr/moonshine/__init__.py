"""Moonshine tiny (English) on ONNX Runtime: the fast CPU ASR engine (``asr.engine = "moonshine"``).

``model`` loads a model folder and decodes greedily (no pipecat); ``stt`` is the pipecat service
that transcribes each VAD segment; ``tokenizer`` turns token ids into text.
"""
