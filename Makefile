# The two set-up commands of the README are `make demo` and `make test`; both create
# the virtual environment and install the project first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install demo test chromium distributed-packages prometheus-packages down status bench clean

$(BIN)/kb: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/kb

# Start the local stack, ingest include/samples through kb_ingest, answer sample questions.
# The stack stays up afterwards for `kb search`; `make down` stops it.
demo: install
	$(BIN)/kb up
	$(BIN)/kb demo

# Every service the tests use is started by the tests themselves (on free loopback ports)
# and stopped when they end. Two passes: the tests that need no local stack run on three
# workers (they wait on Airflow and their own services more than they compute: two workers
# kept 1.2 of the 2 cores busy; a file stays on one worker, so a module fixture starts once),
# the two modules with a stack of their own (the distributed stack, the soak) first among them,
# in collection order (xdist would sort the files by their number of tests, and those have one
# or two); then the `sequential` ones, one
# at a time: the tests that time the OCR engine against a timeout, and every suite on the one
# live stack (tests/live.py).
test: install chromium distributed-packages prometheus-packages
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not sequential"
	$(BIN)/python -m pytest -m sequential

# The search page's browser test drives Debian's Chromium (Playwright cannot download one here).
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium >/dev/null; } || { echo "make test needs Debian's chromium package \
		(apt-get install chromium, as root)" >&2; exit 1; }

# The distributed stack (kb up --distributed, and its test) runs Debian's Postgres and Redis.
distributed-packages:
	@{ ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && command -v redis-server >/dev/null; } || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null; } || \
		{ echo "make test needs Debian's postgresql and redis-server packages (apt-get install, as root)" >&2; exit 1; }

# The alert rules' unit tests run Debian's promtool (package prometheus); Alertmanager's
# amtool (package prometheus-alertmanager) checks include/config/alertmanager.yml.
prometheus-packages:
	@{ command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null; } || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null; } || \
		{ echo "make test needs Debian's prometheus and prometheus-alertmanager packages (apt-get install, as root)" >&2; exit 1; }

down:
	$(BIN)/kb down

status:
	$(BIN)/kb status

bench: install
	$(BIN)/kb up
	$(BIN)/kb bench ingest

clean: down
	rm -rf .kb
