# The two commands of the README: `make demo` (main job) and `make test` (test suite).
VENV ?= .venv
RUN_DIR ?= runs/acl-quick

.PHONY: setup demo test lint

# One stamp per set of extras (RL=1, FROZEN=1, GPU=1, HF=1 ask scripts/setup.sh for them): `FROZEN=1 make
# setup` after a plain `make setup` installs the extra instead of finding the plain stamp up to date.
EXTRAS := $(if $(filter 1,$(RL)),-rl)$(if $(filter 1,$(FROZEN)),-frozen)$(if $(filter 1,$(GPU)),-gpu)$(if $(filter 1,$(HF)),-hf)
STAMP := $(VENV)/.installed$(EXTRAS)

$(STAMP): requirements.txt pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

setup: $(STAMP)

# The shipped models evaluated by `make demo` (each in runs/<name>-pretrained/): the cross-domain 2-task
# model and the two 5-task meta-finetuned ones (domain- and class-incremental), each chosen on
# meta-validation and meta-trained without the test benchmarks' concepts. The evaluation is seeded
# (the same episodes and demonstration draws every time): docs/results.md, summary row "shipped models".
PRETRAINED ?= acl-cross acl-5task-domain acl-5task-class

# First evaluates the shipped checkpoints, then meta-trains and evaluates the cross-domain `quick` preset;
# DEMO_ARGS: overrides of that training, e.g. `make demo DEMO_ARGS=train.backbone_precision=bf16` (the
# opt-in bfloat16 backbone, on CPUs with native bfloat16: docs/results.md, "ACL step").
DEMO_ARGS ?=
demo: setup
	@for name in $(PRETRAINED); do \
	  if [ -f pretrained/$$name/model.safetensors ]; then \
	    $(VENV)/bin/fastweights acl eval pretrained/$$name --out runs/$$name-pretrained || exit 1; \
	    echo "Shipped $$name model: runs/$$name-pretrained/report.md"; fi; done
	$(VENV)/bin/fastweights acl train --preset quick --run-dir $(RUN_DIR) --resume --eval $(DEMO_ARGS)
	@echo "Quick run: $(RUN_DIR)/report.md"

test: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
