"""The embedded-model half of ``throughput.py``: a round of 3 agents, naive vs sequential vs batched.

Run through ``python bench/throughput.py --no-http`` (see its docstring), or
alone: ``python bench/throughput_local.py``. Every loop is bounded by
``--local-reps`` and ``--local-tokens``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

ROUNDS = ("0", "1", "1s")
"""0: three agents, the same question; 1: Du et al.'s debate round (own history, then the peers'
replies: the prompts differ right after the question); 1s: the same replies in moot's engine
layout (the shared transcript first, the agent's own instruction last), which prefix reuse favours."""
MODES = ("naive", "sequential", "batched")
"""naive: sequential calls with the KV cache reset before each (no reuse at all); sequential:
what LocalModel does (llama-cpp-python's Llama reuses the previous call's common prefix);
batched: llama.cpp's batch API (shared prefix decoded once, the agents generate together)."""


def _chatml(messages: list[tuple[str, str]]) -> str:
    # SmolLM2's template (tokenizer.chat_template), default system prompt included.
    text = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    )
    for role, content in messages:
        text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    return text + "<|im_start|>assistant\n"


class _Batched:
    """Three sequences in one llama.cpp context: shared prefix decoded once, then batched decoding."""

    def __init__(self, path: str, n_seq: int, threads: int, unified: bool = False) -> None:
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        params = L.llama_context_default_params()
        params.n_ctx = 4096
        params.n_batch = 1024
        params.n_ubatch = 512
        params.n_seq_max = n_seq
        params.n_threads = threads
        params.n_threads_batch = threads
        # Split KV (one stream per sequence): a token attends only to its own sequence's cells, and
        # seq_cp copies the shared prefix once. Unified KV shares the prefix cells but makes every
        # token attend over all sequences' cells (masked), which costs more on long debate prompts.
        params.kv_unified = unified
        self.ctx = L.llama_init_from_model(self.model, params)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.batch = L.llama_batch_init(1024, 0, n_seq)
        self.n_seq = n_seq
        n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.eog = [t for t in range(n_vocab) if L.llama_vocab_is_eog(self.vocab, t)]

    def close(self) -> None:
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model) if hasattr(
            self.L, "llama_model_free"
        ) else self.L.llama_free_model(self.model)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """entries: (token, pos, seq, want_logits); at most the batch size."""
        b = self.batch
        b.n_tokens = len(entries)
        for i, (tok, pos, seq, logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed: {rc}")

    def round(
        self, prompts: list[list[int]], max_tokens: int, seeds: list[int], temp: float, fixed: bool = False
    ) -> int:
        """Generate for every prompt at once; returns generated tokens.

        With ``fixed`` the end-of-generation tokens are never sampled (logit bias), so every
        sequence generates exactly ``max_tokens``: equal work for a throughput comparison.
        """
        L = self.L
        mem = L.llama_get_memory(self.ctx)
        L.llama_memory_clear(mem, True)
        common = 0
        while all(common < len(p) - 1 for p in prompts) and len({p[common] for p in prompts}) == 1:
            common += 1  # each sequence keeps >= 1 own token so it gets its own logits
        for start in range(0, common, 1024):  # shared prefix once, on sequence 0
            chunk = range(start, min(common, start + 1024))
            self._decode([(prompts[0][i], i, 0, False) for i in chunk])
        for seq in range(1, len(prompts)):
            L.llama_memory_seq_cp(mem, 0, seq, -1, -1)
        # Each agent's own suffix, all but its last token, in batches of up to 1024 tokens; then the
        # agents' last tokens together, so every sequence's logits are in the last decoded batch.
        body = [(p[i], i, s, False) for s, p in enumerate(prompts) for i in range(common, len(p) - 1)]
        for start in range(0, len(body), 1024):
            self._decode(body[start : start + 1024])
        self._decode([(p[-1], len(p) - 1, s, True) for s, p in enumerate(prompts)])
        last_index = {s: s for s in range(len(prompts))}
        samplers = []
        for seed in seeds:
            chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
            if fixed:
                bias = (L.llama_logit_bias * len(self.eog))(*[L.llama_logit_bias(t, -1e9) for t in self.eog])
                n_vocab = L.llama_vocab_n_tokens(self.vocab)
                L.llama_sampler_chain_add(
                    chain, L.llama_sampler_init_logit_bias(n_vocab, len(self.eog), bias)
                )
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(temp))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed))
            samplers.append(chain)
        active = {s: len(p) for s, p in enumerate(prompts)}  # seq -> next position
        generated = 0
        for step in range(max_tokens):
            entries = []
            for seq in list(active):
                token = L.llama_sampler_sample(samplers[seq], self.ctx, last_index[seq])
                if L.llama_vocab_is_eog(self.vocab, token):
                    del active[seq]
                    continue
                generated += 1
                entries.append((token, active[seq], seq, True))
                active[seq] += 1
            if not entries or step == max_tokens - 1:  # the last sampled tokens need no decode
                break
            self._decode(entries)
            last_index = {seq: j for j, (_, _, seq, _) in enumerate(entries)}
        for chain in samplers:
            L.llama_sampler_free(chain)
        return generated


def local_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    try:
        import llama_cpp
    except ImportError:
        print("[local] llama_cpp is not installed: skipped (pip install 'moot[local]')")
        return []
    from moot.bench.tasks import ArithmeticTask
    from moot.models.local import bundled_model_path

    path = str(bundled_model_path())
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads, verbose=False
    )
    batched = _Batched(path, 3, args.threads, unified=args.kv_unified)
    task = ArithmeticTask()
    items = task.items(args.local_reps, args.seed)
    totals: dict[tuple[str, str], list[float]] = {}
    per_rep: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}  # (rep, round) -> mode -> (s, tokens)

    def tokens(text: str) -> list[int]:
        return list(llm.tokenize(text.encode(), add_bos=False, special=True))

    for rep, item in enumerate(items):
        round0 = [_chatml([("user", item.prompt)])] * 3
        seeds = [1000 * rep + a for a in range(3)]
        replies = []
        for round_no in ROUNDS:
            if round_no == "0":
                prompts = round0
            elif round_no == "1":  # Du et al.'s layout: each agent's own history, then its peers
                prompts = [
                    _chatml(
                        [
                            ("user", item.prompt),
                            ("assistant", replies[a]),
                            ("user", task.debate_prompt(item, [replies[j] for j in range(3) if j != a])),
                        ]
                    )
                    for a in range(3)
                ]
            else:  # moot's engine layout: the shared transcript first, the agent's own part last
                transcript = "\n\n".join(f"Agent {j + 1}: {replies[j]}" for j in range(3))
                prompts = [
                    _chatml(
                        [
                            (
                                "user",
                                f"{item.prompt}\n\nThe agents' answers so far:\n\n{transcript}\n\n"
                                f"You are agent {a + 1}. Use the other agents' answers as additional "
                                f"advice. Can you provide an updated answer? {task.format_instruction(item)}",
                            )
                        ]
                    )
                    for a in range(3)
                ]
            # Rotate the order rep by rep so a burst of load on a shared machine hits every mode alike.
            order = MODES[rep % 3 :] + MODES[: rep % 3]
            for mode in order:
                t0 = time.perf_counter()
                if mode in ("naive", "sequential"):
                    bias = {t: -1e9 for t in batched.eog} if args.fixed_length else None
                    outs = []
                    llm.reset()  # no reuse across modes: sequential reuses only within its own round
                    for p, s in zip(prompts, seeds, strict=True):
                        if mode == "naive":
                            llm.reset()  # forget the KV cache: every call reads its whole prompt
                        outs.append(
                            llm.create_completion(
                                p, max_tokens=args.local_tokens, temperature=0.7, seed=s, logit_bias=bias
                            )
                        )
                    gen = sum(o["usage"]["completion_tokens"] for o in outs)
                    if round_no == "0" and mode == "sequential":
                        replies = [o["choices"][0]["text"] for o in outs]
                else:
                    gen = batched.round(
                        [tokens(p) for p in prompts], args.local_tokens, seeds, 0.7, args.fixed_length
                    )
                dt = time.perf_counter() - t0
                per_rep.setdefault((rep, round_no), {})[mode] = (dt, float(gen))
                acc = totals.setdefault((mode, round_no), [0.0, 0.0, 0.0])
                acc[0] += dt
                acc[1] += gen
                acc[2] += 3
                prompt_len = sum(len(tokens(p)) for p in prompts)
                print(
                    f"[local] rep {rep} round {round_no} {mode:10s} {dt:6.2f}s generated={gen} "
                    f"prompt tokens={prompt_len}",
                    flush=True,
                )
    batched.close()
    rows = []
    for round_no in ROUNDS:
        for mode in MODES:
            wall, gen, calls = totals[(mode, round_no)]
            rows.append(
                {
                    "part": "local",
                    "round": round_no,
                    "mode": mode,
                    "calls_per_s": calls / wall,
                    "tokens_per_s": gen / wall,
                    "wall_s": wall,
                    "generated": gen,
                }
            )
        for fast, slow in (("batched", "naive"), ("sequential", "naive"), ("batched", "sequential")):
            # Per-rep speed-ups are robust to a burst of load hitting one rep: report their median.
            ratios = sorted(v[slow][0] / v[fast][0] for (_, r), v in per_rep.items() if r == round_no)
            tok = sorted(
                (v[fast][1] / v[fast][0]) / (v[slow][1] / v[slow][0])
                for (_, r), v in per_rep.items()
                if r == round_no
            )
            rows.append(
                {
                    "part": "local",
                    "round": round_no,
                    "mode": f"speedup_{fast}_vs_{slow}",
                    "calls_per_s": statistics.median(ratios),
                    "tokens_per_s": statistics.median(tok),
                }
            )
            print(
                f"[local] round {round_no} {fast} vs {slow}: median per-rep gain calls/s "
                f"x{statistics.median(ratios):.2f}, tok/s x{statistics.median(tok):.2f} "
                f"(per rep: {', '.join(f'{x:.2f}' for x in ratios)})",
                flush=True,
            )
        summary = " | ".join(
            f"{m} {totals[(m, round_no)][2] / totals[(m, round_no)][0]:.2f} calls/s "
            f"{totals[(m, round_no)][1] / totals[(m, round_no)][0]:.1f} tok/s"
            for m in MODES
        )
        print(f"[local] round {round_no}: {summary}", flush=True)
    return rows


if __name__ == "__main__":
    import throughput

    sys.exit(throughput.main(["--no-http", *sys.argv[1:]]))
