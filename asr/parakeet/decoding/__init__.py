"""The label-looping TDT decoder and its GPU drivers.

``label_looping``: the decoder itself (plain torch, any device). ``graph_decoder``: the same loop
as one CUDA graph with WHILE nodes (``while_graph``, ``graph_modes``, ``cuda_api``: the loop
machinery and its fallbacks; ``selftest``: checks a loop mode on this runtime), with the loop
bodies fused into Triton kernels (``fused_step``). ``carry_bank``: per-stream decoder carries
kept on the device for the streaming batcher.
"""
