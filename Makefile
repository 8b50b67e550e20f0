# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test demo lint lock render

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

test: $(VENV)/.installed
	$(PY) -m ruff check src tests scripts benchmarks
	$(PY) -m pytest

demo: $(VENV)/.installed
	$(PY) scripts/demo.py

render: $(VENV)/.installed
	$(PY) scripts/render_actions.py

lock: $(VENV)/.installed
	$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.9 \
	  --generate-hashes --no-header --annotation-style line -o requirements/runtime.txt
