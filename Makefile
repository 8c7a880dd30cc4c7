# gputext: `make demo` and `make test` do all the set-up on a fresh machine (Python 3.11+).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO    ?= out/demo
PYTEST  := $(BIN)/python -m pytest

.PHONY: install demo test test-fast test-gpu clean
.DEFAULT_GOAL := demo

$(STAMP): pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# The main pipeline on the built-in synthetic corpus, on the GPU if there is one, else the CPU.
demo: $(STAMP)
	@mkdir -p $(DEMO)
	$(BIN)/gputext doctor
	@if $(BIN)/python -c "import sys; from gputext.backend import resolve; sys.exit(resolve('auto').name != 'cuda')"; then \
	  $(BIN)/gputext doctor --compile --jobs 0; fi  # a GPU: every command's kernels into the kernel cache, once
	$(BIN)/gputext corpus synth --preset demo -o $(DEMO)/corpus.h5
	$(BIN)/gputext corpus info $(DEMO)/corpus.h5
	$(BIN)/gputext corpus split $(DEMO)/corpus.h5 --test-size 0.2 --seed 1 -o $(DEMO)/split
	@$(MAKE) --no-print-directory demo-steps BIN=$(BIN) DEMO=$(DEMO)
	@echo "demo finished: outputs in $(DEMO)/"

# Families append their steps to demo-steps in scripts/make/*.mk (double-colon rule).
demo-steps::
	@true

# Two passes, side by side (CI has 2 cores; each pass is mostly one busy process): everything on the
# CPU (kernels also compiled to PTX for real), and the kernel tests inside numba's CUDA simulator,
# which must be switched on before numba is imported (hence its own process).
test: $(STAMP)
	@echo "make test: the CPU pass and the simulator pass run side by side (the simulator's log follows the CPU pass)"
	@log=$$(mktemp); \
	NUMBA_ENABLE_CUDASIM=1 $(PYTEST) -m "cudasim" -p no:cacheprovider >$$log 2>&1 & sim=$$!; \
	$(PYTEST) -m "not cudasim and not gpu"; cpu=$$?; \
	wait $$sim; rc=$$?; echo "== simulator pass (NUMBA_ENABLE_CUDASIM=1 pytest -m cudasim) =="; cat $$log; rm -f $$log; \
	[ $$cpu -eq 0 ] && { [ $$rc -eq 0 ] || [ $$rc -eq 5 ]; }

test-gpu: $(STAMP)
	$(PYTEST) -m gpu

clean:
	rm -rf out build *.egg-info .pytest_cache

# $(call script_targets,TARGET,SCRIPT,OUT): make TARGET runs scripts/SCRIPT.py --out $(OUT) and
# make TARGET-quick the same with --quick (the scripts' shared options: scripts/harness/cli.py).
define script_targets
.PHONY: $(1) $(1)-quick
$(1): $$(STAMP)
	$$(BIN)/python scripts/$(2).py --out $$($(3))
$(1)-quick: $$(STAMP)
	$$(BIN)/python scripts/$(2).py --quick --out $$($(3))
endef

-include scripts/make/*.mk
