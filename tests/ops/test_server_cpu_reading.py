"""The transcription-server benchmark's CPU reading keeps the time of a process that exits between two reads."""

from __future__ import annotations

import os
import subprocess
import sys

from agent.capacity.server_cpu import tree_cpu_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"


def test_a_reaped_childs_cpu_time_stays_in_the_descendants_sum() -> None:
    """Run 103's cold arm read -0.75 server CPU s for a level: a descendant that exited took its time with it."""
    own0, descendants0 = tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BURN], check=True)  # starts, burns 0.5 s of CPU, exits, is reaped
    own1, descendants1 = tree_cpu_seconds(os.getpid())
    assert descendants1 - descendants0 >= 0.4
    assert own1 >= own0
