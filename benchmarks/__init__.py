"""Benchmark scripts and the model zoo (run `python -m benchmarks --help`)."""
