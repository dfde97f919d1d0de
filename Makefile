# lastline: `make demo` and `make test` work on a fresh Debian machine (as root); both run `make setup` first.
# `make docs` builds the documentation site (docs/, mkdocs.yml) strictly: a broken link or page fails it; `make docs-serve`
# serves it on 127.0.0.1:8000.
.PHONY: docs docs-serve setup demo ui test test-newcomer test-fast test-distributed faults bench bench-physical bench-logical bench-restore bench-rebuild bench-impact bench-pitr bench-scale bench-encryption bench-rotation lint house coverage clean
# the benchmarks' deployment settings: their runs keep backups under bench/results (or a --work elsewhere in /tmp), unattended
BENCH_ENV = LASTLINE_BACKUP_ROOTS="file://$(CURDIR)/bench/results,file:///tmp,s3://?aws_conn_id=bench_s3,ssh://" LASTLINE_APPROVAL=false

setup:
	@scripts/setup.sh

demo: setup
	@.venv/bin/python -m lastline_dev.demo

ui: setup  # Airflow's UI on the demo's servers (after `make demo`): http://127.0.0.1:8080, or the next free port (it prints the URL)
	@.venv/bin/python -m lastline_dev.ui

test: setup  # the suite (~25 min here); the newcomer's walk in a browser is its own target, run by CI after it
	@.venv/bin/python -m pytest -q tests -m "not newcomer" --durations=25

test-newcomer: setup  # a newcomer's first hour in a real browser: make demo (twice, and after a kill), make ui, every DAG from its form (~12 min)
	@.venv/bin/python -m pytest -q -m newcomer tests

faults: setup  # the fault matrix: each fault's error and the proof nothing was lost (also part of `make test`)
	@.venv/bin/python -m pytest -q -m faults tests

test-distributed: setup  # Celery on Postgres + Redis, two workers, REST-driven (also part of `make test` where they answer)
	@.venv/bin/python -m pytest -q -m distributed tests

test-fast: setup  # run on every change: tests/unit and the other tests that need no server, Airflow DB or S3 (< 60 s; `slow` in pytest.ini)
	@.venv/bin/python -m pytest -q tests -m "not e2e and not slow"

bench:  # every benchmark with its defaults; ARGS go to one bench-* target alone
	@$(MAKE) --no-print-directory bench-physical ARGS=
	@$(MAKE) --no-print-directory bench-logical ARGS=
	@$(MAKE) --no-print-directory bench-restore ARGS=
	@$(MAKE) --no-print-directory bench-rebuild ARGS=
	@$(MAKE) --no-print-directory bench-impact ARGS=
	@$(MAKE) --no-print-directory bench-pitr ARGS=
	@$(MAKE) --no-print-directory bench-scale ARGS=
	@$(MAKE) --no-print-directory bench-encryption ARGS=
	@$(MAKE) --no-print-directory bench-rotation ARGS=

bench-physical: setup
	@$(BENCH_ENV) .venv/bin/python bench/physical_bench.py $(ARGS)

bench-logical:
	@LASTLINE_BENCH=1 scripts/setup.sh
	@$(BENCH_ENV) .venv/bin/python bench/logical_bench.py $(ARGS)

# bench-restore, the canonical race: 8 sysbench-shaped tables x 1M rows + one of 4M, 2 threads each; lastline's logical_restore on
# bin/airflow standalone (a warm-up run, then one, timed from the run's start to its end in the metadata DB) against myloader 1.0
# --optimize-keys=AFTER_IMPORT_ALL_TABLES of a mydumper 1.0 --format=LOAD_DATA dump, at buffer pools 4G and 512M (~12 min). Prints per
# pool the ratio, lastline's task timeline, trigger-to-first-row, last-row-to-end and CPU per process group; the dump step (lastline's dump
# against mydumper 1.0, on a warm source and a cold one) and the issue's goals, met or not; a record in bench/records.
# myloader 1.0 comes from bench/.mydumper1, built by bench/build_mydumper1.sh from LASTLINE_MYDUMPER1_SRC (a checkout:
# git clone --branch v1.0.1-3 https://github.com/mydumper/mydumper); without it the race says so and uses Debian's 0.10.
# ARGS add the other methods and the older race (bench/logical_restore_bench.py's docstring); quick: ARGS="--tables 2 --rows 50000 --pools 512M"
bench-restore:
	@LASTLINE_BENCH=1 scripts/setup.sh
	@$(BENCH_ENV) .venv/bin/python bench/logical_restore_bench.py $(ARGS)

bench-rebuild: setup
	@$(BENCH_ENV) .venv/bin/python bench/rebuild_bench.py $(ARGS)

bench-pitr:  # point-in-time recovery: the archive's worst lag under load (one held stream; on bin/airflow standalone across run boundaries), parallel replay vs mariadb-binlog | mariadb (sysbench)
	@LASTLINE_BENCH=1 scripts/setup.sh
	@$(BENCH_ENV) .venv/bin/python bench/pitr_bench.py $(ARGS)

bench-scale:  # issue 31: many tables (steps and DAG runs), many backups, big data (2 and 10 GB: over an hour); --myloader1 DIR adds mydumper/myloader 1.0 and the goal at 10,000 tables and 10 GB (>= 1.20x), with its causes when not met
	@LASTLINE_BENCH=1 scripts/setup.sh
	@$(BENCH_ENV) .venv/bin/python bench/scale_bench.py $(ARGS)

bench-encryption: setup  # issue 46: backups and restores unencrypted, AES-256-GCM, ChaCha20-Poly1305 in turns (<= 5%); backup_verify's read against sha256 by hand (~15 min)
	@$(BENCH_ENV) .venv/bin/python bench/encryption_bench.py $(ARGS)
bench-rotation: setup  # key_rotation's steps on 500 encrypted backups' manifests: under 60 s, no data object rewritten (bench/rotation_bench.py)
	@$(BENCH_ENV) .venv/bin/python bench/rotation_bench.py $(ARGS)

bench-impact:  # what a backup costs production: sysbench write latency with and without one (sysbench installed here)
	@LASTLINE_BENCH=1 scripts/setup.sh
	@$(BENCH_ENV) .venv/bin/python bench/impact_bench.py $(ARGS)

docs: setup  # the documentation site into .site/ (MkDocs, Material theme), strict: a broken link fails the build
	@.venv/bin/mkdocs build --strict --quiet --site-dir .site

docs-serve: setup  # the documentation site, rebuilt as you edit, on http://127.0.0.1:8000 (search included); Ctrl-C stops it
	@.venv/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000

coverage: setup  # the fast tier under coverage: a figure per module of the package (CI prints it)
	@.venv/bin/python -m coverage run --source=include/lastline --data-file=.coverage.fast -m pytest -q tests -m "not e2e and not slow"
	@.venv/bin/python -m coverage report --data-file=.coverage.fast --skip-empty --sort=cover

house: setup  # the package's house in figures: rooms, floors, arrows up, the longest functions, modules without a unit test
	@.venv/bin/python -m lastline_dev.house

lint: setup  # ruff on everything, mypy on the whole package (settings in pyproject.toml)
	@.venv/bin/ruff check dags plugins include tests bench tools
	@.venv/bin/mypy

clean:
	-.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox destroy source
	-.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox destroy target
	-.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox destroy staging
	-.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox destroy drill
	-.venv/bin/python -m lastline_dev.sandbox --root .demo/sandbox destroy replica
	rm -rf .demo .airflow
