"""smart-turn v3 as a torch model, batched across callers, hosted by the engine process on the GPU.

pipecat ships smart-turn v3.2 as a QDQ int8 ONNX file for the CPU: 34 ms of a core per inference on the 2-core
box (``bench/results/smart_turn_cpu.json``), run once per caller per pause, on the session workers' cores
that 256 callers already saturate (run 55). Here the same weights, dequantized from that file
(``onnx_weights``), run as a torch module (``model.SmartTurnV3``) with the features on the device
(``features``); ``batcher.TurnBatcher`` scores every pending request of a process in one call, and
``remote`` serves it from the engine process to every session process (``vad.turn_model = "engine"``).
"""
