"""Measured runs: corpora, importers, the measurements oracle, fitting and cross-validation.

Comparison side: the estimate path never imports this package (import-linter
contract in ``.importlinter``); measured seconds reach a comparison only after
both estimates of a record exist (:mod:`harness.measurements.oracle`).
"""
