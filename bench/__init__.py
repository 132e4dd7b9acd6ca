"""Side-by-side benchmarks: numpy, PyTorch (CPU), tinygrad (DEV=CPU) and uopkit on the same inputs, in one process.

Run `python -m bench` (or `make bench`); `python -m bench --help` lists the options. Timings are printed as a table
with uopkit's speed relative to each other framework and saved as JSON. Nothing here is asserted in tests: the smoke
test (tests/test_bench.py) only checks that `--quick` runs and produces well-formed results.
"""
