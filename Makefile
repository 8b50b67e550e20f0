# Two commands do all set-up on a fresh machine: `make demo` and `make test`; `make check` is
# the fast loop while editing (lint, types, and every test not marked e2e or slow).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test check demo lint lock render

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# mermaid's own parser (npm, run by node) checks the charts we emit; tests skip with a reason
# where node/npm are missing (.ci/run installs them, and the Pushgateway, with apt-get).
MERMAID := tests/mermaid/node_modules/.package-lock.json
$(MERMAID): tests/mermaid/package-lock.json
	if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix tests/mermaid --no-audit --no-fund --loglevel=error; fi

# GitHub's OpenAPI description (npm @octokit/openapi): every answer of the test GitHub server
# is validated against it (testkit/openapi_contract.py); without npm, validation is off (warned).
OPENAPI := tests/openapi/node_modules/.package-lock.json
$(OPENAPI): tests/openapi/package-lock.json
	if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix tests/openapi --no-audit --no-fund --loglevel=error; fi

# Karpenter's v1 API models (npm @kubernetes-models/karpenter) check deploy/karpenter's
# NodePools (tests/deploy/test_karpenter.py).
KARPENTER := tests/karpenter/node_modules/.package-lock.json
$(KARPENTER): tests/karpenter/package-lock.json
	if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix tests/karpenter --no-audit --no-fund --loglevel=error; fi

LINTED := src tests testkit scripts benchmarks deploy

test: $(VENV)/.installed $(MERMAID) $(OPENAPI) $(KARPENTER)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy
	$(PY) -m pytest

# The fast loop's tests wait on child processes and loopback servers more than they compute:
# four workers per core (at most 8) keep the cores busy (2 cores: 2 min 58 s, against 3 min
# 24 s with the suite's two per core).
CHECK_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 2); w=$$((4 * n)); [ $$w -gt 8 ] && w=8; echo $$w)

check: $(VENV)/.installed $(MERMAID) $(OPENAPI) $(KARPENTER)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy
	PYTEST_XDIST_AUTO_NUM_WORKERS=$(CHECK_WORKERS) $(PY) -m pytest -m "not e2e and not slow"

demo: $(VENV)/.installed
	$(PY) scripts/demo.py

render: $(VENV)/.installed
	$(PY) scripts/render_actions.py

# One hash-pinned lock per dependency group (requirements/*.in); see README.
UV_COMPILE = UV_PYTHON_DOWNLOADS=never $(VENV)/bin/uv pip compile --universal --python-version 3.9 --generate-hashes \
	--no-header --annotation-style line
lock: $(VENV)/.installed
	# actions-toolkit's declared dependencies (PyGithub, requests) serve its github module,
	# which we never import: base installs it alone.
	$(UV_COMPILE) --no-deps requirements/base.in -o requirements/base.txt
	# PyGithub works without cryptography (pyjwt's optional backend, for GitHub App auth).
	$(UV_COMPILE) --no-emit-package cryptography --no-emit-package pycparser \
	  requirements/github.in -o requirements/github.txt
	$(UV_COMPILE) requirements/nvml.in -o requirements/nvml.txt
	$(UV_COMPILE) requirements/conda.in -o requirements/conda.txt
	$(UV_COMPILE) requirements/monitor.in -o requirements/monitor.txt
	# boto3's urllib3 is the github group's own pin (one venv holds both groups).
	$(UV_COMPILE) -c requirements/github.txt requirements/cloud.in -o requirements/cloud.txt
