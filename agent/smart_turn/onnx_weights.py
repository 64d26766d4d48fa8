"""smart-turn v3's weights out of pipecat's QDQ int8 ONNX file, as a float state dict for ``SmartTurnV3``.

The export keeps the float parameters that were not quantized (layer norms, positions, most biases) under
their PyTorch names; the quantized ones are ``DequantizeLinear`` nodes over int8 / int32 initializers,
some under exporter names (``val_25``). Those are folded here, ``(q - zero_point) * scale`` per channel,
and named by the graph: a MatMul or Gemm is the linear layer whose bias its output is added to, and the
one projection without a bias in a layer (Whisper's ``k_proj``) is the MatMul that reads that layer's
``self_attn_layer_norm`` output without one. The activations' fake quantization is not reproduced:
the torch model runs the weights in float (``tests/test_smart_turn_torch.py`` bounds the difference).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import numpy as np

BUNDLED = ("pipecat.audio.turn.smart_turn.data", "smart-turn-v3.2-cpu.onnx")
_Q = ("QuantizeLinear", "DequantizeLinear")


def bundled_path() -> Path:
    """pipecat's bundled smart-turn v3.2 file."""
    return Path(str(resources.files(BUNDLED[0]).joinpath(BUNDLED[1])))


class SmartTurnWeightsError(ValueError):
    """The ONNX file is not a smart-turn v3 export this converter understands."""


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray:
    q = q.astype(np.float64)
    zero = np.zeros(()) if zero is None else zero.astype(np.float64)
    scale = scale.astype(np.float64)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = scale.size
        scale, zero = scale.reshape(shape), (zero.reshape(shape) if zero.ndim == 1 else zero)
    return ((q - zero) * scale).astype(np.float32)


def load_state_dict(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """The float state dict (``SmartTurnV3`` names) of the ONNX file at ``path`` (default: pipecat's bundled one)."""
    import onnx
    from onnx import numpy_helper

    path = Path(path) if path else bundled_path()
    try:
        graph = onnx.load(str(path)).graph
    except Exception as exc:  # a truncated or foreign file: say which
        raise SmartTurnWeightsError(f"{path}: not a readable ONNX file ({type(exc).__name__}: {exc})") from exc
    const = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:  # fold the weights' DequantizeLinear nodes (all their inputs are initializers)
        if node.op_type == "DequantizeLinear" and all(i in const for i in node.input if i):
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            zero = const[node.input[2]] if len(node.input) > 2 and node.input[2] else None
            const[node.output[0]] = _dequantize(const[node.input[0]], const[node.input[1]], zero, axis)
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def through_qdq(name: str) -> list:
        """The nodes reading ``name``, looking through the activations' Quantize/Dequantize pairs."""
        out = []
        for node in consumers.get(name, []):
            out.extend(through_qdq(node.output[0]) if node.op_type in _Q else [node])
        return out

    state: dict[str, np.ndarray] = {}
    for name, value in const.items():  # float parameters kept under their PyTorch names
        if name.startswith("inner.") and value.dtype == np.float32 and not re.search(r"_(scale|zero_point)$", name):
            state[name.removeprefix("inner.").removesuffix("_DequantizeLinear_Output")] = value
    layer_norm_out: dict[str, str] = {}  # a layer's self_attn_layer_norm output -> "encoder.layers.N"
    for node in graph.node:
        if node.op_type == "LayerNormalization":
            m = re.match(r"inner\.(encoder\.layers\.\d+)\.self_attn_layer_norm\.weight$", node.input[1])
            if m:
                layer_norm_out[node.output[0]] = m.group(1)
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in const:
            bias = [n.input[1] for n in through_qdq(node.output[0]) if n.op_type == "Add" and n.input[1] in const]
            if bias:
                prefix = bias[0].removeprefix("inner.").removesuffix(".bias")
            else:
                source = node.input[0].removesuffix("_DequantizeLinear_Output")
                if source not in layer_norm_out:
                    raise SmartTurnWeightsError(f"{path}: MatMul {node.name or node.output[0]} has no bias and "
                                                "does not read a self-attention layer norm")
                prefix = layer_norm_out[source] + ".self_attn.k_proj"
            state[prefix + ".weight"] = np.ascontiguousarray(const[node.input[1]].T)
        elif node.op_type == "Gemm":
            prefix = node.input[2].removeprefix("inner.").removesuffix(".bias")
            state[prefix + ".weight"] = const[node.input[1]]
            state[prefix + ".bias"] = const[node.input[2]]
        elif node.op_type == "Conv":
            prefix = node.input[1].removeprefix("inner.").removesuffix(".weight_DequantizeLinear_Output")
            state[prefix + ".weight"] = const[node.input[1]]
            state[prefix + ".bias"] = const[node.input[2]]
    for key in [k for k in state if k.endswith("_quantized")]:
        del state[key]
    return state


def _int8_rows(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(q, scale)`` with ``float32(q[i] * scale[i]) == weight[i]`` exactly for every row (axis 0), ``q`` int8 and
    ``scale`` float32: the per-channel int8 weights the converter dequantized, recovered; ``None`` if not so."""
    rows = weight.reshape(weight.shape[0], -1).astype(np.float64)
    q = np.zeros(rows.shape, np.int8)
    scales = np.zeros(rows.shape[0], np.float32)
    for i, row in enumerate(rows):
        peak = float(np.abs(row).max())
        if peak == 0.0:
            continue
        for qmax in (127, 128, 126, 125):
            s0 = np.float32(peak / qmax)
            for s in (s0, np.nextafter(s0, np.float32(0)), np.nextafter(s0, np.float32(np.inf))):
                qi = np.round(row / np.float64(s))
                if np.abs(qi).max() <= 127 and np.array_equal((qi * np.float64(s)).astype(np.float32),
                                                              row.astype(np.float32)):
                    q[i], scales[i] = qi, s
                    break
            else:
                continue
            break
        else:
            return None
    return q.reshape(weight.shape), scales


def save_npz(out: str | Path, path: str | Path | None = None) -> Path:
    """The converted weights as a compressed ``.npz`` for a machine without the ``onnx`` package or pipecat (the
    H200 image): a per-channel int8 weight as its int8 values and float32 scales (``NAME@q``, ``NAME@s``, ~7 MB in
    all instead of 15 MB of float32), read back bit for bit; every other tensor as float32."""
    out = Path(out)
    arrays: dict[str, np.ndarray] = {}
    for name, value in load_state_dict(path).items():
        packed = _int8_rows(value) if value.ndim >= 2 and value.size >= 4096 else None
        if packed is None:
            arrays[name] = value
        else:
            arrays[name + "@q"], arrays[name + "@s"] = packed
    np.savez_compressed(out, **arrays)
    return out


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise SmartTurnWeightsError(f"{path}: not a readable .npz of weights ({type(exc).__name__}: {exc})") from exc
    state: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if key.endswith("@s"):
            continue
        if key.endswith("@q"):
            name = key[:-2]
            scale = arrays.get(name + "@s")
            if scale is None or scale.shape != value.shape[:1]:
                raise SmartTurnWeightsError(f"{path}: {name} has int8 values without a scale per row")
            rows = value.reshape(value.shape[0], -1).astype(np.float64) * scale.astype(np.float64)[:, None]
            state[name] = rows.astype(np.float32).reshape(value.shape)
        else:
            state[key] = value.astype(np.float32)
    return state


def load_model(path: str | Path | None = None):  # -> SmartTurnV3
    """``SmartTurnV3`` with the weights of ``path``: an ONNX export (default: pipecat's bundled file) or a ``.npz``
    from ``save_npz`` (strict: every parameter present, nothing extra)."""
    import torch

    from agent.smart_turn.model import SmartTurnV3

    model = SmartTurnV3()
    raw = _read_npz(Path(path)) if path and str(path).endswith(".npz") else load_state_dict(path)
    state = {k: torch.from_numpy(np.array(v)) for k, v in raw.items()}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise SmartTurnWeightsError(f"{path or bundled_path()}: the weights do not fit smart-turn v3: {exc}") from exc
    return model.eval()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write smart-turn v3's weights as a .npz (save_npz).")
    parser.add_argument("out", help="the .npz to write")
    parser.add_argument("--onnx", default="", help="the ONNX export (default: pipecat's bundled smart-turn v3.2)")
    args = parser.parse_args()
    print(save_npz(args.out, args.onnx or None))
