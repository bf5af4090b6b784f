# The two commands a newcomer needs: `make demo` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	$(BIN)/innerguard demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/bench_runtime.py
