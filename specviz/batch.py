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

Rows share one prompt (what sampling-based consistency checks need: it is prefilled once and
its KV cache copied to every row) or each row brings its own (a list of prompts, as a server
batches requests; shorter prompts simply leave holes). Every row runs until
``max_new_tokens`` or its EOS, and a finished row leaves the batch, so stragglers do not
drag the finished rows through every remaining model call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .drafters import ModelDrafter, _draft_step
from .engine import _check_count, _eos_set, _live_policy, _prompt_tensor
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
    # Seconds since the call started at which each new token of each row was committed
    # (all tokens accepted in one verification share its time): TTFT and inter-token latency.
    token_times: list[list[float]] | None = None

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

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these rows (finished rows leave the batch)."""
        self.cache.batch_select_indices(rows.to(self.device))
        self.mask = self.mask[rows.to(self.device)]


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
                # a hole before any valid token (a 1-token prompt beside longer ones):
                # its logits are never used
                out.append(self.model.next_logits(ctx) if ctx else self._blank())
            rows.append(torch.stack(out))
        return torch.stack(rows)  # [B, num_logits, V]

    def prefill_shared(self, prompt: torch.Tensor) -> None:
        batch = self.mask.shape[0]
        self.tokens = prompt.view(1, -1).expand(batch, -1).clone()
        self.mask = torch.ones(batch, prompt.numel(), dtype=torch.bool)

    def trim(self) -> None:
        pass

    def select(self, rows: torch.Tensor) -> None:
        self.tokens, self.mask = self.tokens[rows], self.mask[rows]

    def _blank(self) -> torch.Tensor:
        return torch.zeros(self.model.vocab_size)


def _batch_runner(model: Any, batch: int):
    if hasattr(model, "make_runner"):  # toy models
        return _ToyBatchRunner(model, batch)
    return _BatchRunner(model, batch)


def _prompts(input_ids: Any, num_sequences: int | None) -> list[torch.Tensor]:
    """One prompt per row: a single prompt repeated ``num_sequences`` times (the same
    tensor object, which :func:`_start` prefills once), or a list of prompts."""
    many = isinstance(input_ids, (list, tuple)) and len(input_ids) > 0
    many = many and not isinstance(input_ids[0], int)
    if not many:
        if num_sequences is None:
            raise ValueError("num_sequences is required when all rows share one prompt")
        prompt = _prompt_tensor(input_ids)
        return [prompt] * _check_count("num_sequences", num_sequences, 1)
    prompts = [_prompt_tensor(p) for p in input_ids]
    if num_sequences is not None and num_sequences != len(prompts):
        raise ValueError(
            f"num_sequences={num_sequences} but {len(prompts)} prompts were given (one row each)"
        )
    return prompts


def _start(runners, prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill all but the last token of every row's prompt; return the pending last tokens
    ([B, 1]) and their validity. A shared prompt is prefilled once and its cache copied;
    different prompts are prefilled together, shorter ones padded with holes."""
    B = len(prompts)
    last = torch.stack([p[-1] for p in prompts]).view(B, 1)
    if all(p is prompts[0] for p in prompts):
        if prompts[0].numel() > 1:
            for r in runners:
                r.prefill_shared(prompts[0][:-1])
    else:
        width = max(p.numel() for p in prompts) - 1
        if width > 0:
            tokens = torch.zeros(B, width, dtype=torch.long)
            valid = torch.zeros(B, width, dtype=torch.bool)
            for b, p in enumerate(prompts):
                tokens[b, : p.numel() - 1] = p[:-1]
                valid[b, : p.numel() - 1] = True
            for r in runners:
                r.extend(tokens, valid, 1)
    return last, torch.ones(B, 1, dtype=torch.bool)


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
    num_sequences: int | None = None,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    record: bool = False,
) -> BatchResult:
    """Standard sampling, batched: ``num_sequences`` samples of one prompt, or one row per
    prompt when ``input_ids`` is a list of prompts. Row i == serial run with seed+i.

    ``model_calls`` counts batched forward passes; their rows are distinct prefixes only."""
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompts = _prompts(input_ids, num_sequences)
    B = len(prompts)
    eos = _eos_set(eos_token_id)
    seqs: list[list[int]] = [[] for _ in range(B)]
    times: list[list[float]] = [[] for _ in range(B)]
    probs_rec: list[list[float]] = [[] for _ in range(B)]
    above_rec: list[list[float]] = [[] for _ in range(B)]
    active = [max_new_tokens > 0] * B
    t0 = time.perf_counter()
    # Rows with the same tokens so far are in the same state: the model runs once per
    # *distinct* prefix (a group) and each row samples from its group's law with its own
    # generator. Samples share their first tokens often (one prompt, peaked first
    # tokens), so early steps cost a handful of rows instead of B.
    firsts: dict[tuple[int, ...], list[int]] = {}
    for r, p in enumerate(prompts):
        if active[r]:
            firsts.setdefault(tuple(p.tolist()), []).append(r)
    groups = list(firsts.values())
    runner = _batch_runner(target, max(1, len(groups)))
    gens = _generators(seed, B, runner.device)
    tokens, _ = _start([runner], [prompts[g[0]] for g in groups]) if groups else (None, None)
    calls = 0
    while groups:
        G = len(groups)
        logits = runner.extend(tokens, torch.ones(G, 1, dtype=torch.bool), 1)[:, -1]  # [G, V]
        calls += 1
        check_logits(logits, "target")
        probs = logits_to_probs(logits, params)  # [G, V]
        members = [r for g in groups for r in g]
        owner = torch.tensor([gi for gi, g in enumerate(groups) for _ in g])
        sub = probs[owner]  # [R, V], each row its group's law
        toks = _sample_rows(
            sub, list(range(len(members))), [gens[r] for r in members], params.is_greedy
        )
        now = time.perf_counter() - t0
        if record:
            pxs, aboves = _rank_stats(sub, torch.tensor(toks))
        children: dict[tuple[int, int], list[int]] = {}
        for j, (r, tok) in enumerate(zip(members, toks, strict=True)):
            seqs[r].append(tok)
            times[r].append(now)
            if record:
                probs_rec[r].append(pxs[j])
                above_rec[r].append(aboves[j])
            active[r] = len(seqs[r]) < max_new_tokens and tok not in eos
            if active[r]:
                children.setdefault((int(owner[j]), tok), []).append(r)
        groups = list(children.values())
        parents = [gi for gi, _ in children]
        if groups and parents != list(range(G)):
            runner.select(torch.tensor(parents, dtype=torch.long))  # fork / drop rows
        tokens = torch.tensor([tok for _, tok in children], dtype=torch.long).view(-1, 1)
    return BatchResult(
        seqs,
        [()] * B,
        [()] * B,
        calls,
        time.perf_counter() - t0,
        [seed + i for i in range(B)],
        probs_rec if record else None,
        above_rec if record else None,
        times,
    )


def speculative_generate_batch(
    target: Any,
    draft: Any,
    input_ids: Any,
    *,
    num_sequences: int | None = None,
    gamma: Any = 4,
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
    """Speculative sampling with a model draft, batched: ``num_sequences`` samples of one
    prompt, or one row per prompt when ``input_ids`` is a list of prompts.

    ``draft`` must be a causal LM (or a :class:`ModelDrafter`); row i reproduces
    ``speculative_generate(..., seed=seed + i)`` on its prompt.

    ``gamma`` is an int or a policy of :mod:`specviz.policies`, which here steers the whole
    batch: before each target call ``next_gamma()`` picks the drafts every row makes (0 = a
    plain decoding step for all rows; the draft then skips the call and catches up on the
    skipped tokens when drafting resumes), and :class:`~specviz.policies.AcceptanceEMA` sees
    the batch size as ``batch_size`` (its ``max_batch`` fallback). ``update()`` gets the
    rows' mean drafted and accepted counts per call (accepted == drafted only when every row
    accepted everything). :class:`~specviz.policies.ConfidenceStop` stops each row's draft
    where its own draft confidence drops. Policies choose how much is drafted, never how it
    is verified, so every row stays lossless; a one-row batch reproduces the serial engine
    with the same policy.
    """
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    policy = _live_policy(gamma)
    if policy is not None and hasattr(policy, "start"):
        policy.start()
    stop = policy if policy is not None and hasattr(policy, "wrap_drafter") else None
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompts = _prompts(input_ids, num_sequences)
    B = len(prompts)
    eos = _eos_set(eos_token_id)
    spec = get_verifier(verifier, greedy=params.is_greedy)
    draft_model = draft.model if isinstance(draft, ModelDrafter) else draft
    if hasattr(draft_model, "propose"):
        raise TypeError("batched speculative decoding needs a model draft, not a drafter object")
    seqs: list[list[int]] = [[] for _ in range(B)]
    times: list[list[float]] = [[] for _ in range(B)]
    probs_rec: list[list[float]] = [[] for _ in range(B)]
    above_rec: list[list[float]] = [[] for _ in range(B)]
    acc_counts: list[list[int]] = [[] for _ in range(B)]
    drf_counts: list[list[int]] = [[] for _ in range(B)]
    active = [max_new_tokens > 0] * B
    calls = 0
    t0 = time.perf_counter()
    # Physical row p of both caches holds a *group* of logical rows in the same state (same
    # tokens so far, same drafts so far). Every row draws with its own generator; a group
    # forks (its cache rows are copied) when its rows' draws differ, and finished rows
    # leave. One prompt and peaked early tokens make the first rounds cost a few rows.
    firsts: dict[tuple[int, ...], list[int]] = {}
    for r, p in enumerate(prompts):
        if active[r]:
            firsts.setdefault(tuple(p.tolist()), []).append(r)
    members = list(firsts.values())
    t_run = _batch_runner(target, max(1, len(members)))
    d_run = _batch_runner(draft_model, max(1, len(members)))
    runners = (t_run, d_run)
    gens = _generators(seed, B, t_run.device)
    if members:
        t_pending, t_valid = _start(runners, [prompts[g[0]] for g in members])
        d_pending, d_valid = t_pending, t_valid
    while members:
        G = len(members)
        if policy is None:
            width = gamma
        else:
            if hasattr(policy, "batch_size"):
                policy.batch_size = G  # rows in the next model call
            width = _check_count("policy gamma", policy.next_gamma(), 0)
        ks = [min(width, max_new_tokens - len(seqs[g[0]]) - 1) for g in members]
        kmax = max(ks)
        fed_last = [False] * G  # a confidence stop already fed the draft its last token
        t_draft0 = time.perf_counter()
        # -- draft: kmax steps, group p drafts its first ks[p] --------------------------------
        drafts = torch.zeros(G, width, dtype=torch.long)
        qs: list[list[torch.Tensor]] = [[] for _ in range(G)]
        d_cols: list[int] = []  # physical draft-cache columns of x_1..x_{kmax-1}
        d_caught_up = kmax > 0  # a plain step leaves the draft cache behind (caught up later)
        if d_caught_up:
            d_logits = d_run.extend(d_pending, d_valid, 1)[:, -1]  # [G, V]
        for i in range(kmax):
            if i >= max(ks):  # every group stopped drafting
                break
            q_all = logits_to_probs(d_logits, params) if spec.draft_mode == "exact" else None
            if stop is not None and i >= stop.min_tokens:
                # the serial ConfidenceStopDrafter's rule, per group, before the draw
                conf = (
                    torch.softmax(d_logits.float(), dim=-1)
                    if params.is_greedy
                    else (q_all if q_all is not None else logits_to_probs(d_logits, params))
                ).amax(-1)  # [G]
                for p in range(G):
                    if i < ks[p] and float(conf[p]) < stop.threshold:
                        ks[p] = i
                        fed_last[p] = i > 0
            split: dict[tuple[int, int], list[int]] = {}  # (parent group, token) -> rows
            q_of: dict[tuple[int, int], torch.Tensor] = {}
            drawing = [p for p in range(G) if i < ks[p]]
            rows = [r for p in drawing for r in members[p]]
            if q_all is not None:  # every drawing row at once, from its group's q
                owner = [p for p in drawing for _ in members[p]]
                toks = _sample_rows(
                    q_all[owner], list(range(len(rows))), [gens[r] for r in rows], params.is_greedy
                )
                drawn = [(p, r, t, q_all[p]) for p, r, t in zip(owner, rows, toks, strict=True)]
            else:  # the bug zoo's misbehaving drafts, row by row
                drawn = []
                for p in drawing:
                    for r in members[p]:
                        tok, q = _draft_step(d_logits[p], params, spec.draft_mode, gens[r])
                        drawn.append((p, r, int(tok), q))
            for p in range(G):
                if i >= ks[p]:
                    split[(p, -1)] = members[p]
            for p, r, tok, q in drawn:
                split.setdefault((p, int(tok)), []).append(r)
                q_of[(p, int(tok))] = q
            split = dict(sorted(split.items()))  # children in parent order
            parents = [p for p, _ in split]
            if parents != list(range(G)):  # fork groups whose rows drew different tokens
                idx = torch.tensor(parents, dtype=torch.long)
                for run in runners:
                    run.select(idx)
                t_pending, t_valid, d_pending, d_valid = (
                    x[idx] for x in (t_pending, t_valid, d_pending, d_valid)
                )
                drafts, d_logits = drafts[idx], d_logits[idx]
                qs = [list(qs[p]) for p in parents]
                ks = [ks[p] for p in parents]
                fed_last = [fed_last[p] for p in parents]
            members = list(split.values())
            G = len(members)
            for c, (p, tok) in enumerate(split):
                if tok >= 0:
                    drafts[c, i] = tok
                    qs[c].append(q_of[(p, tok)])
            if i + 1 < max(ks):
                feed_valid = torch.tensor([i + 1 < ks[c] for c in range(G)]).view(G, 1)
                d_cols.append(d_run.mask.shape[1])
                d_logits = d_run.extend(drafts[:, i : i + 1], feed_valid, 1)[:, -1]
        # -- verify: one target call on [pending, drafts] -----------------------------------
        t_verify0 = time.perf_counter()
        draft_valid = torch.arange(width).view(1, -1) < torch.tensor(ks).view(-1, 1)  # [G, g]
        tokens = torch.cat([t_pending, drafts], 1)
        valid = torch.cat([t_valid, draft_valid], 1)
        t_col0 = t_run.mask.shape[1] + t_pending.shape[1]  # first draft column
        logits = t_run.extend(tokens, valid, width + 1)  # [G, g+1, V]
        calls += 1
        check_logits(logits, "target")
        p_all = logits_to_probs(logits, params)  # [G, g+1, V]
        now = time.perf_counter() - t0
        step_k: list[int] = []
        step_n: list[int] = []
        after: dict[tuple[int, int, int], list[int]] = {}  # (group, accepted, next) -> rows
        rec_phys: list[int] = []
        rec_pos: list[int] = []
        rec_tok: list[int] = []
        rec_rows: list[int] = []
        for p, g in enumerate(members):
            k = ks[p]
            q_b = torch.stack(qs[p]) if k else None
            for r in g:
                v = spec.verify(drafts[p, :k], q_b, p_all[p, : k + 1], gens[r])
                n = v.num_accepted
                committed = drafts[p, :n].tolist() + [v.next_token]
                committed = committed[: max_new_tokens - len(seqs[r])]
                for j, tok in enumerate(committed):
                    if tok in eos:
                        committed = committed[: j + 1]
                        break
                seqs[r].extend(committed)
                times[r].extend([now] * len(committed))
                if record:
                    rec_phys += [p] * len(committed)
                    rec_pos += range(len(committed))
                    rec_tok += committed
                    rec_rows += [r] * len(committed)
                acc_counts[r].append(n)
                drf_counts[r].append(k)
                step_k.append(k)
                step_n.append(n)
                active[r] = len(seqs[r]) < max_new_tokens and committed[-1] not in eos
                if active[r]:
                    after.setdefault((p, n, v.next_token), []).append(r)
        if rec_phys:  # p(token) and the mass ranked above it, all committed tokens at once
            pxs, aboves = _rank_stats(p_all[rec_phys, rec_pos], torch.tensor(rec_tok))
            for r, px, above in zip(rec_rows, pxs, aboves, strict=True):
                probs_rec[r].append(px)
                above_rec[r].append(above)
        if policy is not None:
            t_end = time.perf_counter()
            drafted = round(sum(step_k) / len(step_k))
            accepted = sum(step_n) // len(step_n)
            if step_n != step_k:  # "all accepted" only when every row accepted everything
                accepted = min(accepted, drafted - 1)
            policy.update(drafted, max(accepted, 0), t_verify0 - t_draft0, t_end - t_verify0)
        members = list(after.values())
        if not members:
            break
        parents = [p for p, _, _ in after]
        idx = torch.tensor(parents, dtype=torch.long)
        if parents != list(range(G)):
            for run in runners:
                run.select(idx)
            drafts = drafts[idx]
            ks = [ks[p] for p in parents]
            fed_last = [fed_last[p] for p in parents]
        G = len(members)
        t_pending = torch.zeros(G, 1, dtype=torch.long)
        t_valid = torch.ones(G, 1, dtype=torch.bool)
        new_pending = torch.zeros(G, 2, dtype=torch.long)
        new_valid = torch.zeros(G, 2, dtype=torch.bool)
        for c, (_, n, nxt) in enumerate(after):
            k = ks[c]
            # holes for rejected drafts, in both caches
            t_run.mask[c, t_col0 + n : t_col0 + width] = False
            for i, col in enumerate(d_cols, start=1):  # column of x_i
                if i > n:
                    d_run.mask[c, col] = False
            t_pending[c, 0] = nxt
            # the draft has seen x_1..x_{k-1} (x_k too after a confidence stop); if all k
            # were accepted it still needs x_k
            if n == k and k > 0 and not fed_last[c]:
                new_pending[c, 0], new_valid[c, 0] = int(drafts[c, k - 1]), True
            new_pending[c, 1], new_valid[c, 1] = nxt, True
        if d_caught_up:
            d_pending, d_valid = new_pending, new_valid
        else:  # the draft skipped this call: it still owes the old pending tokens
            d_pending = torch.cat([d_pending[idx], new_pending], 1)
            d_valid = torch.cat([d_valid[idx], new_valid], 1)
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
        times,
    )
