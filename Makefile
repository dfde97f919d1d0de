# lastline: `make demo` and `make test` work on a fresh Debian machine (as root); both run `make setup` first.
.PHONY: setup demo test test-fast bench lint clean

setup:
	@scripts/setup.sh

demo: setup
	@PYTHONPATH=include .venv/bin/python -m lastline.demo

test: setup
	@PYTHONPATH=include .venv/bin/python -m pytest -q tests

test-fast: setup
	@PYTHONPATH=include .venv/bin/python -m pytest -q tests -m "not e2e"

bench: setup
	@PYTHONPATH=include .venv/bin/python bench/physical_bench.py $(ARGS)

lint: setup
	@.venv/bin/python -m compileall -q dags include plugins tests bench

clean:
	-PYTHONPATH=include .venv/bin/python -m lastline.sandbox --root .demo/sandbox destroy source
	-PYTHONPATH=include .venv/bin/python -m lastline.sandbox --root .demo/sandbox destroy target
	rm -rf .demo .airflow
