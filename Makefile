# Two commands on a fresh machine: `make train` and `make test`. Both idempotent.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
STAMP  := $(VENV)/.installed
RUN    := runs/ddpg-pendulum

.PHONY: train test test-slow lint docs clean bench-venv

# bash with pipefail: an install's exit status survives the filter below
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# Two notices the install would print that say nothing about this project: setuptools'
# "Editable installation" note (filtered by its message, in pip and the build backend), and
# pip's "Location ... is ignored" for each package that a machine-wide extra index (pip.conf)
# does not carry. Every other warning and error still shows.
QUIET_PIP := PYTHONWARNINGS="ignore:Editable installation"
NOT_OURS  := grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true

# export (jax2onnx, onnxruntime, onnx: wheels, about 270 MB, no torch) so that make test runs
# the ONNX policies against Agent.act; without it those tests skip; wandb (about 60 MB) so that
# the W&B tests run (offline, no network); without it they skip
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(QUIET_PIP) $(VENV)/bin/python -m pip install -q --upgrade pip 2>&1 | { $(NOT_OURS); }
	$(QUIET_PIP) $(VENV)/bin/python -m pip install -q -e ".[mujoco,dmc,atari,distributed,tensorboard,docs,dev,export,wandb]" 2>&1 | { $(NOT_OURS); }
	touch $(STAMP)

# DDPG on Pendulum-v1 for 20k steps; writes $(RUN)/curve.png and prints the final return.
train: $(STAMP)
	@if [ -f $(RUN)/checkpoints/latest ]; then \
	  $(VENV)/bin/offpolicy train ddpg --env Pendulum-v1 --steps 20000 --run-dir $(RUN) --resume; \
	else \
	  rm -rf $(RUN); \
	  $(VENV)/bin/offpolicy train ddpg --env Pendulum-v1 --steps 20000 --seed 0 --eval-every 2000 --run-dir $(RUN); \
	fi
	@echo "learning curve: $(RUN)/curve.png"

# The suite on TEST_WORKERS processes (pytest-xdist): each test file stays on one worker (its
# module fixtures are built once); the tests that start Ray take turns (fixture ray_turn in
# tests/conftest.py), as --dist loadgroup ignores its groups on pytest 9.2 (pytest-xdist
# issue 1386). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(PYTEST)

test-slow: $(STAMP)
	$(PYTEST) -m slow

# The documentation site, warnings as errors (a broken link or autodoc target fails it); -E
# reads every page afresh, so every page's navigation shows a newly added page
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

lint: $(STAMP)
	$(VENV)/bin/ruff check offpolicy tests benchmarks

# The peers (SB3 2.9.2 + SBX 0.28) for benchmarks/, in their own venv so torch never enters ours.
# torch 2.13.0 first and alone (a CPU wheel; anything else pulls GBs of CUDA), then the peers.
bench-venv:
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install -q torch==2.13.0
	.venv-bench/bin/python -m pip install -q stable-baselines3==2.9.2 sbx-rl==0.28.0 "gymnasium[mujoco]>=1.0" "mujoco>=3.2,<4"
# PFRL 0.4.0 (the ACER peer, benchmarks/peers_pfrl.py) with --no-deps, so pip never touches
# torch; it imports packaging and filelock (pure Python, named here: pfrl does not declare
# packaging); its declared gym is not installed: peers_pfrl.py aliases `import gym` to Gymnasium.
	.venv-bench/bin/python -m pip install -q --no-deps pfrl==0.4.0 packaging filelock

clean:
	rm -rf $(VENV) runs .pytest_cache docs/_build docs/results docs/reference/flags.md
