"""``cadence capacity``: how many callers this machine serves inside its latency budgets.

``corpus`` finds distinct utterances, ``caller`` is one synthetic caller that talks and
listens in real time through the real pipeline, ``ramp`` runs concurrency levels and holds
each to steady state, ``analysis`` turns chunk arrivals into per-stream delivery and finds
the knee, ``report`` writes the cap, the JSON and the PNG curve.
"""
