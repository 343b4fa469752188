"""Comparison oracles: Calculon 0.1.0 (recorded or live) and the paper holdout.

Nothing under harness.oracles is importable from the estimate path (an
import-linter contract enforces it).
"""
