"""Batched decoding with ragged acceptance: many sequences, one model call per step.

Each row accepts its own number of drafts. Instead of re-aligning rows, the KV cache keeps
one physical column per fed token and a validity mask: rejected drafts (and the dummy slots
of rows that have less to feed) become *holes* that attention never sees, and every row's
RoPE positions count only its valid tokens. Rollback is clearing mask bits.

Randomness is per row: row ``i`` uses a Generator seeded with ``seed + i`` and consumes it in
exactly the order :func:`specviz.speculative_generate` does, and verification is the very
same per-row verifier code, so row ``i`` reproduces the serial run with ``seed=seed + i``
(up to floating-point differences between batched and single-row matmuls) and is lossless
by construction. The batch buys speed where it matters -- the model forward passes.

Rows share one prompt (what sampling-based consistency checks need): it is prefilled once
and its KV cache copied to every row. Every row runs until ``max_new_tokens`` or its EOS.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .drafters import ModelDrafter, _draft_step
from .engine import _check_count, _eos_set, _prompt_tensor
from .sampling import SamplingParams, check_logits, logits_to_probs, sample_with_uniform
from .verify import get_verifier

__all__ = ["BatchResult", "autoregressive_generate_batch", "speculative_generate_batch"]


@dataclass(frozen=True)
class BatchResult:
    sequences: list[list[int]]  # new tokens of each row
    accepted_counts: list[tuple[int, ...]]  # per row, per step it took part in
    drafted_counts: list[tuple[int, ...]]
    model_calls: int  # batched target calls
    total_time: float
    seeds: list[int]
    # With record=True: for every emitted token, the target's (processed) probability of it
    # and the probability mass ranked above it -- enough for log-probabilities and the
    # randomized PIT without a second teacher-forcing pass.
    token_probs: list[list[float]] | None = None
    mass_above: list[list[float]] | None = None

    @property
    def tokens_per_second(self) -> float:
        n = sum(len(s) for s in self.sequences)
        return n / self.total_time if self.total_time > 0 else float("nan")


class _BatchRunner:
    """Physical-column KV cache with a validity mask, for a transformers causal LM."""

    def __init__(self, model: Any, batch: int) -> None:
        import inspect

        from transformers import DynamicCache

        self.model = model
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)

    def extend(self, tokens: torch.Tensor, valid: torch.Tensor, num_logits: int) -> torch.Tensor:
        """tokens, valid: [B, m] -> logits [B, num_logits, V] (float32).

        Not under inference_mode itself: the mask must stay an ordinary tensor so rollback
        can clear bits in place."""
        tokens, valid = tokens.to(self.device), valid.to(self.device)
        before = self.mask.sum(1, keepdim=True)  # [B, 1] valid tokens so far
        positions = (before + valid.long().cumsum(1) - 1).clamp_min(0)  # [B, m]
        self.mask = torch.cat([self.mask, valid], dim=1)
        with torch.inference_mode():
            return self._forward(tokens, positions, num_logits)

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, num_logits: int):
        out = self.model(
            input_ids=tokens,
            attention_mask=self.mask.long(),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=num_logits,
            **{self._cache_kw: self.cache},
        )
        return out.logits[:, -num_logits:].float()

    def prefill_shared(self, prompt: torch.Tensor) -> None:
        """Run the common prompt once (batch 1) and copy its KV cache to every row."""
        batch = self.mask.shape[0]
        with torch.inference_mode():
            self.model(
                input_ids=prompt.view(1, -1).to(self.device),
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kw: self.cache},
            )
        self.cache.batch_repeat_interleave(batch)
        self.mask = torch.ones(batch, prompt.numel(), dtype=torch.bool, device=self.device)

    def trim(self) -> None:
        """Drop trailing columns that are holes in every row (cheap crop)."""
        alive = self.mask.any(0).nonzero()
        keep = int(alive[-1]) + 1 if alive.numel() else 0
        extra = self.mask.shape[1] - keep
        if extra:
            self.cache.crop(-extra)
            self.mask = self.mask[:, :keep]


class _ToyBatchRunner:
    """The same interface over a toy model (logits from each row's valid tokens)."""

    def __init__(self, model: Any, batch: int) -> None:
        self.model = model
        self.device = torch.device("cpu")
        self.tokens = torch.zeros(batch, 0, dtype=torch.long)
        self.mask = torch.zeros(batch, 0, dtype=torch.bool)

    def extend(self, tokens: torch.Tensor, valid: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.tokens = torch.cat([self.tokens, tokens.cpu()], 1)
        self.mask = torch.cat([self.mask, valid.cpu()], 1)
        L = self.tokens.shape[1]
        rows = []
        for b in range(self.tokens.shape[0]):
            out = []
            for col in range(L - num_logits, L):
                ctx = tuple(self.tokens[b, : col + 1][self.mask[b, : col + 1]].tolist())
                out.append(self.model.next_logits(ctx))
            rows.append(torch.stack(out))
        return torch.stack(rows)  # [B, num_logits, V]

    def prefill_shared(self, prompt: torch.Tensor) -> None:
        batch = self.mask.shape[0]
        self.tokens = prompt.view(1, -1).expand(batch, -1).clone()
        self.mask = torch.ones(batch, prompt.numel(), dtype=torch.bool)

    def trim(self) -> None:
        pass


def _batch_runner(model: Any, batch: int):
    if hasattr(model, "make_runner"):  # toy models
        return _ToyBatchRunner(model, batch)
    return _BatchRunner(model, batch)


def _start(runners, prompt: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill all but the last prompt token once, shared by every row; return the pending
    last token ([B, 1]) and its validity."""
    if prompt.numel() > 1:
        for r in runners:
            r.prefill_shared(prompt[:-1])
    return prompt[-1:].expand(batch, 1), torch.ones(batch, 1, dtype=torch.bool)


def _rank_stats(probs: torch.Tensor, tokens: torch.Tensor) -> tuple[list[float], list[float]]:
    """probs [c, V], tokens [c] -> (p(token), mass of tokens ranked above it), where the
    ranking is by probability, ties broken by id (the order of randomized_pit)."""
    tok = tokens.to(probs.device).view(-1, 1)
    px = probs.gather(1, tok)  # [c, 1]
    ids = torch.arange(probs.shape[1], device=probs.device).view(1, -1)
    above = (probs > px) | ((probs == px) & (ids < tok))
    return px.view(-1).tolist(), (probs * above).sum(1).tolist()


def _uniforms(gens: list[torch.Generator], rows: list[int]) -> torch.Tensor:
    """One uniform from each listed row's generator (the draw ``sample`` would make)."""
    return torch.stack(
        [
            torch.rand((), generator=gens[b], device=gens[b].device, dtype=torch.float64)
            for b in rows
        ]
    )


def _sample_rows(probs: torch.Tensor, rows: list[int], gens, greedy: bool) -> list[int]:
    """Sample one token for each listed row of ``probs`` [B, V], vectorised."""
    if not rows:
        return []
    sub = probs[rows]  # [r, V]
    if greedy:
        return sub.argmax(-1).tolist()
    return sample_with_uniform(sub, _uniforms(gens, rows).to(sub.device)).tolist()


def _generators(seed: int, n: int, device: torch.device) -> list[torch.Generator]:
    return [torch.Generator(device=device).manual_seed(seed + i) for i in range(n)]


def autoregressive_generate_batch(
    target: Any,
    input_ids: Any,
    *,
    num_sequences: int,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    record: bool = False,
) -> BatchResult:
    """``num_sequences`` standard samples of one prompt; row i == serial run with seed+i."""
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    B = _check_count("num_sequences", num_sequences, 1)
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompt = _prompt_tensor(input_ids)
    eos = _eos_set(eos_token_id)
    runner = _batch_runner(target, B)
    gens = _generators(seed, B, runner.device)
    seqs: list[list[int]] = [[] for _ in range(B)]
    probs_rec: list[list[float]] = [[] for _ in range(B)]
    above_rec: list[list[float]] = [[] for _ in range(B)]
    active = [max_new_tokens > 0] * B
    t0 = time.perf_counter()
    tokens, valid = _start([runner], prompt, B)
    calls = 0
    while any(active):
        logits = runner.extend(tokens, valid, 1)[:, -1]  # [B, V]
        calls += 1
        check_logits(logits, "target")
        probs = logits_to_probs(logits, params)  # [B, V]
        nxt = torch.zeros(B, 1, dtype=torch.long)
        rows = [b for b in range(B) if active[b]]
        toks = _sample_rows(probs, rows, gens, params.is_greedy)
        if record:
            pxs, aboves = _rank_stats(probs[rows], torch.tensor(toks))
        for j, (b, tok) in enumerate(zip(rows, toks, strict=True)):
            seqs[b].append(tok)
            nxt[b, 0] = tok
            if record:
                probs_rec[b].append(pxs[j])
                above_rec[b].append(aboves[j])
            active[b] = len(seqs[b]) < max_new_tokens and tok not in eos
        tokens, valid = nxt, torch.tensor(active).view(B, 1)
    return BatchResult(
        seqs,
        [()] * B,
        [()] * B,
        calls,
        time.perf_counter() - t0,
        [seed + i for i in range(B)],
        probs_rec if record else None,
        above_rec if record else None,
    )


def speculative_generate_batch(
    target: Any,
    draft: Any,
    input_ids: Any,
    *,
    num_sequences: int,
    gamma: int = 4,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    record: bool = False,
) -> BatchResult:
    """``num_sequences`` speculative samples of one prompt with a model draft, batched.

    ``draft`` must be a causal LM (or a :class:`ModelDrafter`); row i reproduces
    ``speculative_generate(..., seed=seed + i)``.
    """
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    B = _check_count("num_sequences", num_sequences, 1)
    _check_count("gamma", gamma, 1)
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompt = _prompt_tensor(input_ids)
    eos = _eos_set(eos_token_id)
    spec = get_verifier(verifier, greedy=params.is_greedy)
    draft_model = draft.model if isinstance(draft, ModelDrafter) else draft
    if hasattr(draft_model, "propose"):
        raise TypeError("batched speculative decoding needs a model draft, not a drafter object")
    t_run, d_run = _batch_runner(target, B), _batch_runner(draft_model, B)
    gens = _generators(seed, B, t_run.device)

    seqs: list[list[int]] = [[] for _ in range(B)]
    probs_rec: list[list[float]] = [[] for _ in range(B)]
    above_rec: list[list[float]] = [[] for _ in range(B)]
    acc_counts: list[list[int]] = [[] for _ in range(B)]
    drf_counts: list[list[int]] = [[] for _ in range(B)]
    active = [max_new_tokens > 0] * B
    t_pending, t_valid = _start([t_run, d_run], prompt, B)  # what each has not seen yet
    d_pending, d_valid = t_pending, t_valid
    calls = 0
    t0 = time.perf_counter()
    while any(active):
        ks = [
            min(gamma, max_new_tokens - len(s) - 1) if a else 0
            for s, a in zip(seqs, active, strict=True)
        ]
        kmax = max(ks)
        # -- draft: kmax steps, row b uses its first ks[b] ---------------------------------
        d_logits = d_run.extend(d_pending, d_valid, 1)[:, -1]  # [B, V]
        drafts = torch.zeros(B, gamma, dtype=torch.long)
        qs: list[list[torch.Tensor]] = [[] for _ in range(B)]
        d_cols: list[int] = []  # physical draft-cache columns of x_1..x_{kmax-1}
        for i in range(kmax):
            rows = [b for b in range(B) if i < ks[b]]
            if spec.draft_mode == "exact":
                q_all = logits_to_probs(d_logits, params)  # [B, V]
                toks = _sample_rows(q_all, rows, gens, params.is_greedy)
                for b, tok in zip(rows, toks, strict=True):
                    drafts[b, i] = tok
                    qs[b].append(q_all[b])
            else:  # the bug zoo's misbehaving drafts, row by row
                for b in rows:
                    tok, q = _draft_step(d_logits[b], params, spec.draft_mode, gens[b])
                    drafts[b, i] = tok
                    qs[b].append(q)
            if i + 1 < kmax:
                feed_valid = torch.tensor([i + 1 < ks[b] for b in range(B)]).view(B, 1)
                d_cols.append(d_run.mask.shape[1])
                d_logits = d_run.extend(drafts[:, i : i + 1], feed_valid, 1)[:, -1]
        # -- verify: one target call on [pending, drafts] -----------------------------------
        draft_valid = torch.arange(gamma).view(1, -1) < torch.tensor(ks).view(-1, 1)  # [B, g]
        tokens = torch.cat([t_pending, drafts], 1)
        valid = torch.cat([t_valid, draft_valid], 1)
        t_col0 = t_run.mask.shape[1] + t_pending.shape[1]  # first draft column
        logits = t_run.extend(tokens, valid, gamma + 1)  # [B, g+1, V]
        calls += 1
        check_logits(logits, "target")
        p_all = logits_to_probs(logits, params)  # [B, g+1, V]
        new_t_pending = torch.zeros(B, 1, dtype=torch.long)
        d_next = torch.zeros(B, 2, dtype=torch.long)
        d_next_valid = torch.zeros(B, 2, dtype=torch.bool)
        rec_rows: list[int] = []
        rec_pos: list[int] = []
        rec_tok: list[int] = []
        for b in range(B):
            if not active[b]:
                continue
            k = ks[b]
            q_b = torch.stack(qs[b]) if k else None
            v = spec.verify(drafts[b, :k], q_b, p_all[b, : k + 1], gens[b])
            n = v.num_accepted
            # holes for rejected drafts, in both caches
            t_run.mask[b, t_col0 + n : t_col0 + gamma] = False
            for i, col in enumerate(d_cols, start=1):  # column of x_i
                if i > n:
                    d_run.mask[b, col] = False
            committed = drafts[b, :n].tolist() + [v.next_token]
            room = max_new_tokens - len(seqs[b])
            committed = committed[:room]
            for j, tok in enumerate(committed):
                if tok in eos:
                    committed = committed[: j + 1]
                    break
            seqs[b].extend(committed)
            if record:
                rec_rows += [b] * len(committed)
                rec_pos += range(len(committed))
                rec_tok += committed
            acc_counts[b].append(n)
            drf_counts[b].append(k)
            active[b] = len(seqs[b]) < max_new_tokens and committed[-1] not in eos
            new_t_pending[b, 0] = v.next_token
            # the draft has seen x_1..x_{k-1}; if all k were accepted it still needs x_k
            if n == k and k > 0:
                d_next[b, 0], d_next_valid[b, 0] = int(drafts[b, k - 1]), True
            d_next[b, 1], d_next_valid[b, 1] = v.next_token, True
        if rec_rows:  # p(token) and the mass ranked above it, all committed tokens at once
            pxs, aboves = _rank_stats(p_all[rec_rows, rec_pos], torch.tensor(rec_tok))
            for b, px, above in zip(rec_rows, pxs, aboves, strict=True):
                probs_rec[b].append(px)
                above_rec[b].append(above)
        for b in range(B):
            if not active[b]:
                d_next_valid[b] = False
        t_pending, t_valid = new_t_pending, torch.tensor(active).view(B, 1)
        d_pending, d_valid = d_next, d_next_valid
        t_run.trim()
        d_run.trim()
    return BatchResult(
        seqs,
        [tuple(a) for a in acc_counts],
        [tuple(d) for d in drf_counts],
        calls,
        time.perf_counter() - t0,
        [seed + i for i in range(B)],
        probs_rec if record else None,
        above_rec if record else None,
    )
