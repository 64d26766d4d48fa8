"""Per-stage latency metrics: sliding-window histograms, stage definitions, budgets, export."""
