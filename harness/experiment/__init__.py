"""The calibration experiment: estimates first, then oracles, then the report."""
