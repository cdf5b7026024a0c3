# Two commands do all set-up on a fresh machine: `make book` and `make test`.
PROFILE ?= workshop
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
CHAPTERS := $(shell $(PYTHON) -c "import yaml" 2>/dev/null && true; sed -n 's/^ *- file: *\(chapters\/[^ ]*\)/\1/p' _toc.yml)

.PHONY: install book chapters html test bench clean-book check-java

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel first: otherwise a dependency pulls a multi-GB CUDA build of torch.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java (JDK/JRE >= 11) is required by ScienceWorld and TextWorldExpress. Install it, e.g.: sudo apt-get install -y default-jre-headless  (macOS: brew install openjdk)"; exit 1; }

# Execute every chapter of _toc.yml with papermill into runs/$(PROFILE)/, then render them.
chapters: install check-java
	$(PY) -m skillbook.book execute --profile $(PROFILE)

html: install
	$(PY) -m skillbook.book assets
	$(PY) -m skillbook.book config --profile $(PROFILE)
	$(VENV)/bin/jupyter-book build -W -n --keep-going .

book: chapters html
	@echo "Book built: _build/html/index.html"

test: install check-java
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

bench: install
	$(PY) bench/run.py

clean-book:
	rm -rf _build
