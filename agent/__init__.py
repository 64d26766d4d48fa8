"""Cadence: the runtime, pipeline assembly, LLM stage, budgets, admission and CLI.

Importing it sets ``OPENBLAS_NUM_THREADS=1`` unless the environment sets it (children inherit it): numpy's
OpenBLAS otherwise starts a thread per core that spin-waits after every matrix product, and smart-turn's
log-mel features are one; the spin then burns a second core through the ONNX run that follows. Measured
on the 2-core box (``bench/smart_turn_cpu.py``): 68-69 -> 34 ms of CPU per smart-turn inference, the same wall
time. OpenBLAS also reads ``OMP_NUM_THREADS``, which ``cadence serve --workers N`` gives each worker as cores / N
(2 on the H200 host's 16 cores with 8 workers): the same one spinning thread per worker there.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
