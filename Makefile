# The two commands of the README: `make demo` (main job) and `make test` (test suite).
VENV ?= .venv
RUN_DIR ?= runs/acl-quick

.PHONY: setup demo test lint

$(VENV)/.installed: requirements.txt pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh

setup: $(VENV)/.installed

PRETRAINED ?= pretrained/acl-standard

# First evaluates the shipped `standard` checkpoint (< 1 min), then meta-trains the `quick` preset.
demo: setup
	@if [ -f $(PRETRAINED)/checkpoints/best.pt ]; then \
	  $(VENV)/bin/fastweights acl eval $(PRETRAINED) --out runs/acl-standard-pretrained && \
	  echo "Shipped standard model: runs/acl-standard-pretrained/report.md"; fi
	$(VENV)/bin/fastweights acl train --preset quick --run-dir $(RUN_DIR) --resume --eval
	@echo "Quick run: $(RUN_DIR)/report.md"

test: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
