"""Constants shared by the offline tests and their fixtures."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UPLOAD_LIMIT_MB = 20  # the test server's upload limit (small, so the 413 test stays cheap)
