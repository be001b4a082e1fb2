"""Benchmarks of the scheduler engine (see README.md); run with ``./run bench``."""
