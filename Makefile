# The README's two commands: `make lab` and `make test`. Both create .venv (once) with the course installed.
# `make check` (seconds) lints before the tests: CI runs it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpucourse-installed
PYTEST_ARGS ?=
LAB_ARGS ?=
# Jupyter refuses to start as root (containers, some cloud VMs) unless told it is deliberate.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test check install regenerate gpu-suite clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.py
	$(PYTHON) scripts/bootstrap.py --venv $(VENV)
	@touch $(STAMP)

# The URLs Jupyter prints open lesson 00 (default_url), so a remote machine's URL, pasted after an SSH tunnel
# (README: "On a remote GPU machine"), lands on the lesson and not on the Launcher.
START := /lab/tree/notebooks/00_start_here.ipynb

lab: $(STAMP)
	@echo "gpucourse: open the URL below that ends in 00_start_here.ipynb?token=...; on a remote machine, first run"
	@echo "gpucourse:   ssh -N -L 8888:localhost:8888 you@this-machine   on your own computer (README: remote GPU)"
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=$(START) $(ROOT_FLAG) $(LAB_ARGS) \
		notebooks/00_start_here.ipynb

# ruff (pyproject.toml's [tool.ruff]): pyflakes' checks and syntax errors, on the code and its tools.
check: $(STAMP)
	$(BIN)/ruff check gpucourse tests benchmarks lab scripts

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --nbval-lax --nbval-current-env -p no:cacheprovider \
		tests notebooks solutions exercises $(PYTEST_ARGS)

# Rebuild exercises/ from solutions/ (run after editing a solution workbook); the Colab badge and install cell first.
regenerate: $(STAMP)
	$(BIN)/python -m gpucourse.colab
	$(BIN)/python -m gpucourse.workbooks

# On a machine with an NVIDIA GPU: gpu tests, every notebook executed, benchmarks; results under benchmarks/results/.
gpu-suite: $(STAMP)
	$(BIN)/python benchmarks/gpu_suite.py

clean:
	rm -rf $(VENV)
