"""Benchmarks of lightweight dispatch: per-op overhead (callgrind), end-to-end latency, size and build time.

Run them all with `./build.sh bench` or `python -m benchmarks.run_benchmarks --help`.
"""
