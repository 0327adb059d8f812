# The README's two commands: `make demo` and `make test`. Everything installs itself.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST  := $(PY) -m pytest

.PHONY: install system-deps rootfs test unit integration e2e check fmt demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev,ansible]'
	@# Bytecode as a wheel install has it (pip compiles on install; an editable one does not, and with
	@# PYTHONDONTWRITEBYTECODE set every `remediate` start would compile ~90 modules: 0.15 s each time).
	$(PY) -m compileall -q src >/dev/null
	touch $(STAMP)

install: system-deps rootfs $(STAMP)

# Sandbox hosts boot Debian's systemd in systemd-nspawn: systemd-container and mmdebstrap (root only).
system-deps:
	@bash sandbox/system-deps.sh

# The hosts' image, built once per recipe (sandbox/rootfs/) into /var/cache/remediate-sandbox/<hash>/.
rootfs: system-deps
	@python3 -m sandbox.rootfs --quiet >/dev/null

# Four workers, a test file each at a time (its module fixtures stay in one process): the e2e tests mostly wait on
# systemd, sshd and the stand-in (two workers kept 2 cores 48% busy: 9:10 of wall for 8:52 of CPU), so four share
# 2 cores better (5:30 on the same machine, 4,000 tests; ~15 min in one). Files go out in tests/conftest.py's order
# (sandbox and e2e files first, unit files last: no long file left for the end) rather than xdist's
# most-tests-first.
test: install
	$(PYTEST) -n 4 --dist loadfile --no-loadscope-reorder

unit: $(STAMP)
	$(PYTEST) -m "not integration and not e2e and not slow"

integration: install
	$(PYTEST) -m integration

e2e: install
	$(PYTEST) -m e2e

check: $(STAMP)
	$(VENV)/bin/ruff format --check src tests sandbox bench examples ansible
	$(VENV)/bin/ruff check src tests sandbox bench examples ansible
	$(VENV)/bin/mypy

fmt: $(STAMP)
	$(VENV)/bin/ruff format src tests sandbox bench examples ansible
	$(VENV)/bin/ruff check --fix src tests sandbox bench examples ansible

demo: install
	$(PY) examples/demo.py

bench: install
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
