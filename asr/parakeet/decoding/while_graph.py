"""Data-dependent GPU loops driven three ways: one CUDA graph with WHILE nodes, graphs + host checks, eager.

A loop is described by a :class:`LoopSpec` (``while flag: body(); <inner loop>; tail()``) whose
callables are pure tensor work on preallocated buffers and whose ``flag`` is a device scalar the
body updates. :func:`build_loop` returns a runner for the fastest mode that works here, falling
back automatically. The conditional mode follows NVIDIA's recipe (NeMo's label looping): the loop
test is a one-thread NVRTC kernel calling ``cudaGraphSetConditional``, the body is captured into
the conditional node's child graph with ``cudaStreamBeginCaptureToGraph``. Body temporaries are
allocated from a ``torch.cuda.MemPool`` owned by the runner, so nothing allocated later can alias
them (the trap in the widely copied helpers).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from asr.parakeet.decoding import cuda_api
from asr.parakeet.decoding.graph_modes import GraphMode, fallbacks, probe, select_mode

log = logging.getLogger(__name__)

_COND_SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                                      unsigned int value);
extern "C" __global__ void cadence_cond_u8(cudaGraphConditionalHandle h, const unsigned char* f) {
  cudaGraphSetConditional(h, f[0] != 0);
}
extern "C" __global__ void cadence_cond_i32(cudaGraphConditionalHandle h, const int* f) {
  cudaGraphSetConditional(h, f[0] != 0);
}
extern "C" __global__ void cadence_cond_i64(cudaGraphConditionalHandle h, const long long* f) {
  cudaGraphSetConditional(h, f[0] != 0);
}
extern "C" __global__ void cadence_cond_any_u8(cudaGraphConditionalHandle h, const unsigned char* f, int n) {
  int v = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v |= f[i];
  v = __syncthreads_or(v);
  if (threadIdx.x == 0) cudaGraphSetConditional(h, v != 0);
}
"""
_ANY_KERNEL = "cadence_cond_any_u8"
_ANY_THREADS = 256
_KERNEL_FOR_DTYPE = {
    torch.bool: "cadence_cond_u8",
    torch.uint8: "cadence_cond_u8",
    torch.int32: "cadence_cond_i32",
    torch.int64: "cadence_cond_i64",
}
_kernels: dict[tuple[int, str], Any] = {}
_kernels_lock = threading.Lock()


@dataclass
class LoopSpec:
    """``while flag: body(); [inner loop]; tail()``. ``flag`` is a device scalar (bool/int) the body updates,
    or a bool/uint8 vector: the loop runs while any element is set."""

    flag: torch.Tensor
    body: Callable[[], None]
    inner: LoopSpec | None = None
    tail: Callable[[], None] | None = None

    def depth(self) -> int:
        return 1 + (self.inner.depth() if self.inner is not None else 0)

    def callables(self) -> list[Callable[[], None]]:
        out = [self.body] + ([self.tail] if self.tail is not None else [])
        return out + (self.inner.callables() if self.inner is not None else [])


class LoopRunner(Protocol):
    mode: GraphMode

    def run(self) -> None:
        """Run the loop to completion on the current stream."""


def _flag_true(flag: torch.Tensor) -> bool:
    return bool(flag.item() if flag.numel() == 1 else flag.any().item())  # one host sync


class EagerLoop:
    """The plain loop: every iteration launches its kernels and reads the flag on the host."""

    mode = GraphMode.EAGER

    def __init__(self, spec: LoopSpec) -> None:
        self.spec = spec

    def run(self) -> None:
        _run_eager(self.spec)


def _run_eager(spec: LoopSpec) -> None:
    while _flag_true(spec.flag):
        spec.body()
        if spec.inner is not None:
            _run_eager(spec.inner)
        if spec.tail is not None:
            spec.tail()


def _warm_up(spec: LoopSpec, streams: list[torch.cuda.Stream]) -> None:
    """Run every callable once on every stream that will capture (cuBLAS workspaces, lazy inits)."""
    current = torch.cuda.current_stream()
    for stream in streams:
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            for fn in spec.callables():
                fn()
        current.wait_stream(stream)
    torch.cuda.synchronize()


class HostCheckedLoop:
    """Each body is a CUDA graph; the host reads the flag between replays (one sync per iteration)."""

    mode = GraphMode.HOST_CHECKS

    def __init__(self, spec: LoopSpec, device: torch.device, warm_up: bool = True) -> None:
        self.spec = spec
        stream = torch.cuda.Stream(device)
        if warm_up:
            _warm_up(spec, [stream])
        self._pool = torch.cuda.graph_pool_handle()
        self.body = self._capture(spec.body, stream)
        self.tail = self._capture(spec.tail, stream) if spec.tail is not None else None
        self.inner = HostCheckedLoop(spec.inner, device, warm_up=False) if spec.inner is not None else None

    def _capture(self, fn: Callable[[], None], stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=stream, capture_error_mode="thread_local"):
            fn()
        return graph

    def run(self) -> None:
        while _flag_true(self.spec.flag):
            self.body.replay()
            if self.inner is not None:
                self.inner.run()
            if self.tail is not None:
                self.tail.replay()


class ConditionalLoop:
    """The whole loop nest as one CUDA graph; loop tests are conditional WHILE nodes (no host syncs)."""

    mode = GraphMode.CONDITIONAL

    def __init__(self, spec: LoopSpec, device: torch.device, warm_up: bool = True) -> None:
        self.spec = spec
        self.device = torch.device(device)
        self._driver, self._runtime, _ = cuda_api.modules()
        self._cuda13 = cuda_api.bindings_version() >= (13,)
        self._keep: list[Any] = []  # argument arrays and handles the graph refers to
        self._stream = torch.cuda.Stream(self.device)
        self._body_streams = [torch.cuda.Stream(self.device) for _ in range(spec.depth())]
        if warm_up:
            _warm_up(spec, [self._stream, *self._body_streams])
        self._pool = torch.cuda.MemPool()  # body temporaries live here, as long as the graph
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self._stream, capture_error_mode="thread_local"):
            status, _, root, *_ = cuda_api.check(
                self._runtime.cudaStreamGetCaptureInfo(self._stream.cuda_stream)
            )
            self._root = root
            with torch.cuda.use_mem_pool(self._pool):
                self._emit_while(spec, depth=0)

    def run(self) -> None:
        self.graph.replay()

    # -- capture helpers -------------------------------------------------------------------------
    def _kernel(self, flag: torch.Tensor) -> Any:
        if flag.numel() > 1:
            if flag.dtype not in (torch.bool, torch.uint8) or not flag.is_contiguous():
                raise TypeError(f"a vector loop flag must be contiguous bool/uint8, not {flag.dtype}")
            name = _ANY_KERNEL
        else:
            name = _KERNEL_FOR_DTYPE.get(flag.dtype)
        if name is None:
            raise TypeError(f"loop flag dtype {flag.dtype} not supported (bool, uint8, int32, int64)")
        if flag.numel() < 1 or flag.device.type != "cuda":
            raise ValueError("loop flag must be a non-empty CUDA tensor")
        key = (self.device.index or 0, name)
        with _kernels_lock:
            if key not in _kernels:
                _kernels[key] = cuda_api.compile_kernel(_COND_SOURCE, name)
            return _kernels[key]

    def _launch_condition(self, kernel: Any, args: Any, stream: torch.cuda.Stream, threads: int = 1) -> None:
        cuda_api.check(
            self._driver.cuLaunchKernel(kernel, 1, 1, 1, threads, 1, 1, 0, stream.cuda_stream, args.ctypes.data, 0)
        )

    def _emit_while(self, spec: LoopSpec, depth: int) -> None:
        import numpy as np

        driver, runtime = self._driver, self._runtime
        parent = torch.cuda.current_stream(self.device)
        handle = cuda_api.check(runtime.cudaGraphConditionalHandleCreate(self._root, 0, 0))
        kernel = self._kernel(spec.flag)
        flag_ptr = np.array([spec.flag.data_ptr()], dtype=np.uint64)
        count = np.array([spec.flag.numel()], dtype=np.int32)
        arg_ptrs = [handle.getPtr(), flag_ptr.ctypes.data] + ([count.ctypes.data] if count[0] > 1 else [])
        args = np.array(arg_ptrs, dtype=np.uint64)
        threads = _ANY_THREADS if count[0] > 1 else 1
        self._keep += [handle, flag_ptr, count, args]

        self._launch_condition(kernel, args, parent, threads)  # decides whether to enter the loop at all
        info = cuda_api.check(runtime.cudaStreamGetCaptureInfo(parent.cuda_stream))
        graph, deps = info[2], info[3]
        params = driver.CUgraphNodeParams()
        params.type = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
        params.conditional.size = 1
        params.conditional.ctx = cuda_api.check(driver.cuCtxGetCurrent())
        set_deps = runtime.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies
        if self._cuda13:
            node = cuda_api.check(driver.cuGraphAddNode(graph, deps, None, len(deps), params))
            cuda_api.check(
                runtime.cudaStreamUpdateCaptureDependencies(parent.cuda_stream, [node], None, 1, set_deps)
            )
        else:
            node = cuda_api.check(driver.cuGraphAddNode(graph, deps, len(deps), params))
            cuda_api.check(
                runtime.cudaStreamUpdateCaptureDependencies(parent.cuda_stream, [node], 1, set_deps)
            )
        body_graph = params.conditional.phGraph_out[0]

        body_stream = self._body_streams[depth]
        cuda_api.check(
            runtime.cudaStreamBeginCaptureToGraph(
                body_stream.cuda_stream,
                body_graph,
                None,
                None,
                0,
                runtime.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal,
            )
        )
        try:
            with torch.cuda.stream(body_stream):
                spec.body()
                if spec.inner is not None:
                    self._emit_while(spec.inner, depth + 1)
                if spec.tail is not None:
                    spec.tail()
                self._launch_condition(kernel, args, body_stream, threads)  # decides whether to iterate again
        finally:
            ended = runtime.cudaStreamEndCapture(body_stream.cuda_stream)
        cuda_api.check(ended)


def build_loop(
    spec: LoopSpec, device: torch.device | str, mode: str | GraphMode = "auto", warm_up: bool = True
) -> LoopRunner:
    """The runner for ``mode`` (``auto``: the best this runtime supports), degrading on failure."""
    device = torch.device(device)
    chosen = select_mode(mode, probe(device))
    for candidate in fallbacks(chosen):
        try:
            if candidate is GraphMode.CONDITIONAL:
                return ConditionalLoop(spec, device, warm_up=warm_up)
            if candidate is GraphMode.HOST_CHECKS:
                return HostCheckedLoop(spec, device, warm_up=warm_up)
            return EagerLoop(spec)
        except (cuda_api.CudaCallError, RuntimeError, ImportError, TypeError) as exc:
            log.warning("building the %s loop failed (%s); falling back", candidate.value, exc)
            torch.cuda.synchronize(device)
    raise AssertionError("unreachable: the eager loop always builds")
