"""Report side: PNG figures (plots of estimates, attribution, schedules).

Drawing uses matplotlib's Agg canvas directly (no pyplot, no global state).
"""
