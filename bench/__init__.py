"""Benchmarks: each ``bench/<area>_<what>.py`` has ``main() -> int`` and reports through
``bench.report`` with a baseline measured in the same run. ``python -m bench`` runs them all.
"""
