"""Options of the Kokoro GPU TTS engine (``tts.kokoro.engine.KokoroEngine``); standard library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KokoroOptions:
    # Weights: a folder (config.json + *.pth + voices/) or a .pth file; "" = random weights of the real
    # architecture (full Kokoro-82M size, or the tiny configuration when ``tiny``).
    checkpoint: str = ""
    voice: str = ""  # a voice pack .pt, or a name under <checkpoint>/voices; "" = the first there (or random)
    tiny: bool = False
    seed: int = 0  # random weights and voice
    device: str = "auto"  # auto: cuda when available, else cpu; or "cuda:1", "cpu"...
    # The convolutional decoder's dtype: float32 | bfloat16 | float16; auto = float32. The text side and
    # the STFTs stay float32. bench/tts_gpu.py measures both before a default changes.
    dtype: str = "auto"
    max_batch: int = 64  # utterances per GPU call
    max_batch_phonemes: int = 0  # 0: no cap; else a tick stops adding utterances past this many ids
    # A tick holding requests due within urgent_s seconds (first clauses) leaves out those that can wait
    # (later clauses still ahead of their listener), so urgent work is not padded to long clauses. -1: off.
    urgent_s: float = 0.5
    # A second worker thread on a high-priority CUDA stream for streams' first clauses only, with graphs of its own
    # (batch <= first_lane_max_batch, clauses <= first_lane_max_frames): a caller's first clause no longer waits
    # for the main lane's tick of later clauses before its own starts (runs 66-71 at 256 callers: 130-225 ms a
    # tick, first-clause wait p50 157-240 ms). While it is busy the main lane takes first clauses too. Off: at
    # a23f9c7/cb4ad90 the two lanes' graphs shared cuBLAS's workspace and hung the GPU (runs 73-74); each graph set is
    # now captured on a stream of its own, not yet measured on a GPU.
    first_lane: bool = False
    first_lane_max_batch: int = 16
    first_lane_max_frames: int = 256  # alignment frames (25 ms): a first clause of up to 12 words fits
    first_lane_max_tokens: int = 128  # phoneme ids + 2 of its text graphs
    # A tick that holds nothing due within urgent_s (working ahead on later clauses) stops at this many phoneme ids
    # (0: no cap): a first clause arriving meanwhile waits for a short tick. Smaller ticks cost more GPU per clause
    # (run 74's replay table: 16 rows of short clauses 1.2 ms a row, 64 rows 0.95), so it is off until measured.
    work_ahead_phonemes: int = 0
    frame_bucket: int = 8  # padded frames rounded up to a multiple (fewer distinct shapes on the GPU)
    speed: float = 1.0
    g2p: str = "espeak"  # espeak (libespeak-ng, Debian's espeak-ng) | chars (letters; load tests only)
    language: str = "en-us"  # the espeak voice used for phonemization
    # A stream's later clauses are due when a listener would run out of audio if it arrived at this
    # multiple of real time (the batcher serves the earliest deadline first; 1.2x is the capacity rule).
    pace: float = 1.25
    first_clause_words: int = 4  # the first clause is cut at its first , ; : — once it has this many words
    first_clause_max_words: int = 12  # ... and at a word boundary after this many when it has no such mark
    max_clause_words: int = 24  # longer sentences are cut at clause marks
    warmup: bool = True  # run one full batch at start (CUDA: measures the peak memory the plan checks)
    warmup_text: str = "Thanks for calling, I can help you with that right away."
    cudnn_benchmark: bool = False
    # torch.compile (dynamic shapes) of the decoder's fused AdaIN/Snake/mask steps (tts/kokoro/fused.py):
    # same output within float rounding; graphs are built during warm-up (seconds each). Off until the
    # H200 run with bench/tts_gpu.py's side-by-side rows confirms the gain (CPU: correct but slow to build).
    compile: bool = False
    compile_mode: str = ""
    # CUDA only: the decoder replayed from CUDA graphs captured at warm-up per (batch, frames) bucket
    # (tts/kokoro/decoder_graphs.py): one launch instead of thousands, so a batch costs its GPU time, not the
    # interpreter's. Batches past the buckets run eagerly. Capture takes seconds; memory ~ the largest bucket.
    cuda_graphs: bool = False
    graph_max_frames: int = 512  # longest padded clause (alignment frames, 25 ms each) a graph holds
    graph_max_cells: int = 64 * 192  # batch x frames of the largest bucket
    # How a batch is cut into replays, on the decoder's and the text side's graphs (tts/kokoro/graph_buckets.py):
    # "cost" (each bucket's replay timed after capture; the rows grouped at the least summed time, so 33 clauses
    # are not padded to 64 rows nor short clauses to a long one; run 70) | "fewest" (one replay of the smallest
    # bucket holding the whole batch, as before run 70).
    graph_plan: str = "cost"
    # With cuda_graphs: the text side (ALBERT, encoders, duration LSTMs) replayed from graphs per (batch, tokens)
    # bucket too (tts/kokoro/text_graphs.py), so a tick is two replays and one host sync, not hundreds of launches.
    text_graphs: bool = True
    graph_max_tokens: int = 256  # longest clause (phoneme ids + 2) a text graph holds; longer ones run eagerly
    graph_max_token_cells: int = 64 * 128  # batch x tokens of the largest text bucket  # torch.compile mode: "" (default) | max-autotune-no-cudagraphs | ...

    def __post_init__(self) -> None:
        if self.graph_plan not in ("cost", "fewest"):
            raise ValueError(f"tts kokoro graph_plan {self.graph_plan!r}: expected 'cost' or 'fewest'")
