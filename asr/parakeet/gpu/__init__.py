"""The offline GPU fast path: log-mel features as tensor ops (``log_mel``), the graphed front end
(features + encoder per shape profile, ``frontend_graphs``) and the pipelined transcriber that
drives it with the graph decoder (``fast_transcriber``). Encoder backends live in
``asr.parakeet.encoders``, the decoder graph and kernels in ``asr.parakeet.decoding``."""
