"""Benchmarks of revise, outside the installed package: ``python -m benchmarks.bench_engine``."""
