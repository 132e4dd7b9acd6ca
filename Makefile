# Developer entry points. PYTHON defaults to the project venv when there is one.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python)
DEVICE ?= CPU

.PHONY: lint test conformance bench bench-quick

lint:
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy --strict --follow-imports=silent core/uopkit/device.py core/uopkit/diskcache.py core/uopkit/hostlib.py core/uopkit/plugin core/uopkit/renderer/__init__.py

test:
	$(PYTHON) -m pytest -q

# the backend conformance suite (uopkit.testing) against one device: make conformance DEVICE=OPENCL
conformance:
	$(PYTHON) -m pytest -q --pyargs uopkit.testing --uopkit-device=$(DEVICE)

# side-by-side benchmarks (numpy, PyTorch, tinygrad, uopkit); the competitors are the `bench` extra
# (pip install -e ".[bench]"), tinygrad's CPU backend also needs a clang; missing ones are skipped with the reason
bench:
	$(PYTHON) -m bench $(BENCH_ARGS)

bench-quick:
	$(PYTHON) -m bench --quick $(BENCH_ARGS)
