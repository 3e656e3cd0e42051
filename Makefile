# Two commands set everything up on a fresh machine with Python 3.11:
#   make run    creates .venv, installs, trains PPO on Pong with live progress
#   make test   creates/updates .venv, runs the test suite
#   make clean  removes .venv and pytest's cache; runs/, wandb/ and videos/ hold your results and are kept
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch is installed on its own first, pinned to a release whose CPU build this kind of machine
# ships on disk; on a GPU machine `make TORCH_SPEC=torch run` takes PyPI's CUDA build instead.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= jax,mujoco,plot,video,dev
# more flags for `make run`, after Pong's: a later --env-id wins, so a budget alone still trains Pong
RUN_ARGS ?=
# The suite runs on 2 pytest-xdist workers: most tests train in one thread, so one worker leaves a core idle. Tests
# of one file share a worker (--dist loadfile): their module-scoped training runs are set up once. The longest files
# go first (--no-loadscope-reorder keeps tests/conftest.py's order), so the workers end together. Tests marked
# idle_cores measure the machine's load, so they run afterwards, alone.
TEST_WORKERS ?= 2

.PHONY: run test lint clean

$(VENV)/.installed: pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 is required, $(PYTHON) is " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	@# setuptools prints a box about folders shadowing the package on every editable install, --quiet or not
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	@touch $@

run: $(VENV)/.installed
	$(PY) cleanrl/ppo_atari_envpool.py --env-id Pong-v5 $(RUN_ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m 'not idle_cores' tests $(PYTEST_ARGS)
	$(PY) -m pytest -m idle_cores tests $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check cleanrl cleanrl_utils tests
	$(PY) -m ruff format --check cleanrl cleanrl_utils tests

clean:
	rm -rf $(VENV) .pytest_cache
