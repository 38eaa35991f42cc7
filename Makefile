# mixer-lightning: `make quickstart` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is installed first, on its own: these releases install from a local wheel cache where one
# exists (x86_64: a CUDA build that also runs on the CPU). Override for another platform, e.g.
#   make TORCH="torch==2.9.1 torchvision==0.24.1" test
TORCH  ?= torch==2.14.1 torchvision==0.29.1
STAMP  := $(VENV)/.installed
# A second venv with the lowest releases pyproject.toml claims (constraints/minimum.txt).
MIN_VENV ?= .venv-min
MIN_STAMP := $(MIN_VENV)/.installed

# The fast suite runs on one pytest-xdist worker per core, each on one thread (tests/conftest.py); the
# next free worker takes the next test (worksteal: a few tests take a minute). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist worksteal

.PHONY: install quickstart test test-min test-slow test-gpu lint reproduce-cpu clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Train the quickstart config on the embedded digits dataset (offline), then evaluate the best
# checkpoint with `mixer test`, exactly as a user would: the checkpoint's run directory brings its
# config, and test_metrics.json goes there. Progress is a bar in a terminal, plain lines in a log.
quickstart: $(STAMP)
	$(BIN)/mixer fit --config configs/quickstart.yaml
	@best=$$(ls -dt runs/quickstart/version_*/checkpoints/best.ckpt | head -n 1); \
	echo "mixer test --ckpt_path $$best"; \
	$(BIN)/mixer test --ckpt_path $$best

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL)

$(MIN_STAMP): pyproject.toml constraints/minimum.txt
	test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet $(TORCH)
	$(MIN_VENV)/bin/python -m pip install --quiet -c constraints/minimum.txt -e '.[dev]'
	touch $(MIN_STAMP)

# The fast suite on the lowest releases we claim (lightning, jsonargparse, timm, torchmetrics, datasets:
# constraints/minimum.txt); `make test` runs it on the newest. CI runs both (.ci/run).
test-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pytest -q $(PARALLEL)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu

# The CIFAR-10 reproductions of docs/reproductions.md at its CPU budget (hours; resumable: run it again
# after an interruption), then their tables and plots. Data: $(MIXER_DATA_ROOT)/cifar10 (HF layout).
reproduce-cpu: $(STAMP)
	MIXER=$(BIN)/mixer PYTHON=$(BIN)/python docs/reproductions/run_cpu.sh
	MIXER=$(BIN)/mixer PYTHON=$(BIN)/python docs/reproductions/report.sh

# Lint and formatting (ruff's formatter, pinned in pyproject's dev extra so every machine formats alike);
# `ruff format mixer_lightning tests docs/reproductions` fixes what the check finds. CI runs it.
lint: $(STAMP)
	$(BIN)/python -m ruff check mixer_lightning tests docs/reproductions
	$(BIN)/python -m ruff format --check mixer_lightning tests docs/reproductions

clean:
	rm -rf $(VENV) $(MIN_VENV) runs *.egg-info .pytest_cache
