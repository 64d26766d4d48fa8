"""Helpers that both ``tests/`` and ``bench/`` use: real speech corpora and WER, audio tracks built
from them, and ``cadence`` server processes. Imports the product packages only; ``tests/`` and
``bench/`` import this package and never each other (``tests/test_import_layers.py`` checks)."""
