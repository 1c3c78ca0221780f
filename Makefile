# First ten minutes: `make demo` and `make test` set everything up themselves.
#   - create .venv (python3 -m venv) if it is missing;
#   - install torch==2.13.0 first, only if the venv cannot import torch (an unpinned torch would pull a
#     multi-GB CUDA build; the pinned one is the CPU build);
#   - install slotopt in editable mode with the demo, test, keras, integrations and triton extras (re-run when
#     pyproject.toml, setup.py or the C kernels change): this also compiles the one-pass C kernels with the
#     machine's C compiler (a failed compile is not an error: the foreach kernels then run; `slotopt info` tells).
#     The integrations (Lightning, transformers, accelerate) are tested for real by `make test`.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.slotopt-installed

.PHONY: demo test setup parity bench info clean-venv

demo: $(STAMP)
	$(VENV)/bin/slotopt demo

test: $(STAMP)
	$(PY) -m pytest

parity: $(STAMP)
	$(VENV)/bin/slotopt parity

bench: $(STAMP)
	$(VENV)/bin/slotopt bench

info: $(STAMP)
	$(VENV)/bin/slotopt info

setup: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml setup.py src/slotopt/kernels/native/slotopt_kernels.c src/slotopt/kernels/native/rules.inc | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install -e '.[demo,test,keras,integrations,triton]'
	@touch $(STAMP)

clean-venv:
	rm -rf $(VENV)
