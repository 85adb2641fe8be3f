"""Benchmark scripts (`python benchmarks/NAME.py`); a package so that the tests import them."""
