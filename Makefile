# lastline: `make demo` and `make test` work on a fresh Debian machine (as root); both run `make setup` first.
.PHONY: setup demo test test-fast faults bench bench-physical bench-logical bench-restore bench-rebuild lint clean

setup:
	@scripts/setup.sh

demo: setup
	@PYTHONPATH=include .venv/bin/python -m lastline.demo

test: setup
	@PYTHONPATH=include .venv/bin/python -m pytest -q tests

faults: setup  # the fault matrix: each fault's error and the proof nothing was lost (also part of `make test`)
	@PYTHONPATH=include .venv/bin/python -m pytest -q -m faults tests

test-fast: setup
	@PYTHONPATH=include .venv/bin/python -m pytest -q tests -m "not e2e"

bench:  # every benchmark with its defaults; ARGS go to one bench-* target alone
	@$(MAKE) --no-print-directory bench-physical ARGS=
	@$(MAKE) --no-print-directory bench-logical ARGS=
	@$(MAKE) --no-print-directory bench-restore ARGS=
	@$(MAKE) --no-print-directory bench-rebuild ARGS=

bench-physical: setup
	@PYTHONPATH=include .venv/bin/python bench/physical_bench.py $(ARGS)

bench-logical:
	@LASTLINE_BENCH=1 scripts/setup.sh
	@PYTHONPATH=include .venv/bin/python bench/logical_bench.py $(ARGS)

bench-restore:
	@LASTLINE_BENCH=1 scripts/setup.sh
	@PYTHONPATH=include .venv/bin/python bench/logical_restore_bench.py $(ARGS)

bench-rebuild: setup
	@PYTHONPATH=include .venv/bin/python bench/rebuild_bench.py $(ARGS)

lint: setup
	@.venv/bin/python -m compileall -q dags include plugins tests bench

clean:
	-PYTHONPATH=include .venv/bin/python -m lastline.sandbox --root .demo/sandbox destroy source
	-PYTHONPATH=include .venv/bin/python -m lastline.sandbox --root .demo/sandbox destroy target
	rm -rf .demo .airflow
