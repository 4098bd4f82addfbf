"""Planning an audit's prompt and size from the models' own laws, before any sampling.

An audit that is to see a TV of 0.05 at position 2 (the first token speculation acts on for
llama-server; the second of two for transformers' assisted generation, which drafts the first
token too) needs a prompt whose first two tokens have few likely values -- and a draft that is
sometimes accepted and sometimes rejected there, or the audit tests nothing speculative. Both
are known before any sample is drawn: the law of the first two tokens is p1(x1) p2(x2 | x1)
(the target's), and with a draft sampled from q and verified with min(1, p/q) the chance
that a drafted token is accepted at a position is 1 - TV(p, q) there, so

- acceptance at position 1: sum_x min(p1(x), q1(x));
- acceptance at position 2: sum_x1 p1(x1) sum_x2 min(p2(x2|x1), q2(x2|x1)) (x1 follows p1
  whichever way it was committed, when the engine is lossless).

The pieces here turn such laws into the plan: the law binned as the audit's ``tokens[:t]``
test bins samples (the 200 likeliest outcomes and a tail bin), the samples per arm for 90%
power at TV 0.05 (:func:`specviz.stats.sample_size_for_tv`, two-sample Pearson, alpha 0.01
before Holm), and -- because the report's own power statement is computed on the law the
samples show, not on the true one -- the statement's distribution over simulated audits at the
planned size. ``scripts/tv05_prompt.py`` (llama-server, laws from the servers) and
``scripts/draft_tv05_prompt.py`` (in-process engines, laws from the transformers models) use
them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "ALPHA",
    "MARGIN",
    "MAX_BINS",
    "MIN_UNCOVERED",
    "POWER",
    "TV",
    "binned",
    "draft_plan",
    "next_token_laws",
    "planned_size",
    "simulated_statement",
    "sizes",
    "two_token_law",
]

TV, ALPHA, POWER = 0.05, 0.01, 0.9
MIN_UNCOVERED = 1e-4  # smaller uncovered mass is rounding: no bin of its own
MAX_BINS = 200  # as the audit's tokens[:t] test (specviz.checks.positions)
MARGIN = 1.15  # the planned size: 15% above the predicted need, rounded up to 50
_SINGLETON_P = 1e-6  # outcomes below this are drawn as distinct ones in simulated audits


def two_token_law(
    law1: dict[int, tuple[str, float]], law2: dict[int, dict[int, tuple[str, float]]]
) -> tuple[list[tuple[tuple[str, str], float]], float]:
    """The law of the first two tokens (as pieces, likeliest first) from the first token's law
    and the second token's law after each first token (``law2[t1]``; first tokens below the
    caller's floor may be missing), and the mass it leaves out (clipped at 0: rounding)."""
    joint: dict[tuple[str, str], float] = {}
    uncovered = 1.0 - sum(p for _, p in law1.values())
    for t1, (piece1, p1) in law1.items():
        if t1 not in law2:
            uncovered += p1
            continue
        for _t2, (piece2, p2) in law2[t1].items():
            key = (piece1, piece2)
            joint[key] = joint.get(key, 0.0) + p1 * p2
        uncovered += p1 * (1.0 - sum(p for _, p in law2[t1].values()))
    return sorted(joint.items(), key=lambda kv: -kv[1]), max(0.0, uncovered)


def binned(
    two: Sequence[tuple[Any, float]], uncovered: float, *, max_bins: int | None = None
) -> np.ndarray:
    """The probability vector the sizes are computed on: the outcomes (``two``, likeliest
    first) and the uncovered mass as a bin of its own only when it is real mass
    (> ``MIN_UNCOVERED``) -- a bin of 1e-8 of rounding would be the head-tail alternative's
    whole tail and make any size look enough. With ``max_bins``, as the audit bins samples:
    the ``max_bins`` likeliest outcomes, and the rest pooled with the uncovered mass in one
    tail bin."""
    return _binned_probs(np.array([p for _, p in two], dtype=float), uncovered, max_bins)


def _binned_probs(probs: np.ndarray, uncovered: float, max_bins: int | None) -> np.ndarray:
    """:func:`binned` on the outcomes' probabilities (likeliest first)."""
    if max_bins is not None:
        if max_bins < 1:
            raise ValueError(f"max_bins must be >= 1, got {max_bins}")
        uncovered = uncovered + float(probs[max_bins:].sum())
        probs = probs[:max_bins]
    law = np.r_[probs, [uncovered] if uncovered > MIN_UNCOVERED else []]
    return law / law.sum()


def sizes(
    law: np.ndarray, *, tv: float = TV, alpha: float = ALPHA, power: float = POWER
) -> dict[str, float]:
    """Outcomes of ``law`` and the samples per arm the two-sample Pearson test needs to see
    ``tv`` with probability ``power`` at ``alpha``, for the report's own alternative
    (``n_head-tail``) and for any difference of that size (``n_least-favourable``); inf where
    no size does."""
    from .. import stats

    out: dict[str, float] = {"outcomes": int((law > 0).sum())}
    for kind in ("head-tail", "least-favourable"):
        try:
            n = stats.sample_size_for_tv(
                law, tv, alpha=alpha, power=power, two_sample=True, alternative=kind
            )
        except ValueError:
            n = math.inf
        out[f"n_{kind}"] = float(n)
    return out


def planned_size(needed: float, *, margin: float = MARGIN, step: int = 50) -> int:
    """``margin`` x ``needed`` rounded up to a multiple of ``step``."""
    if not math.isfinite(needed) or needed <= 0:
        raise ValueError(f"no finite size to plan from: {needed}")
    return int(math.ceil(margin * needed / step) * step)


def simulated_statement(
    law: np.ndarray,
    singletons: float,
    n: int,
    *,
    reps: int = 100,
    seed: int = 0,
    alpha: float = ALPHA,
    max_bins: int = MAX_BINS,
) -> np.ndarray:
    """The report's power statement at one position (the smallest TV detectable with 90%
    probability, :func:`specviz.stats.min_detectable_tv` on the pooled binned law the samples
    show) over ``reps`` simulated audits of ``n`` samples per arm drawn from ``law`` (the
    outcomes' probabilities) in both arms, with ``singletons`` more mass whose every draw is an
    outcome of its own (the outcomes too rare or unknown to enumerate). Outcomes below
    ``1e-6`` in ``law`` are drawn as singletons too (in 2n <= 10^5 draws they repeat with
    probability below 0.1)."""
    from .. import stats

    law = np.asarray(law, dtype=float)
    rare = law < _SINGLETON_P
    probs = np.r_[law[~rare], singletons + float(law[rare].sum())]
    probs = np.clip(probs, 0.0, None)
    probs /= probs.sum()
    rng = np.random.default_rng(seed)
    out = np.empty(reps)
    for r in range(reps):
        counts = rng.multinomial(2 * n, probs)
        pooled = np.r_[counts[:-1][counts[:-1] > 0], np.ones(counts[-1])]
        pooled = -np.sort(-pooled)
        if pooled.size > max_bins:
            pooled = np.r_[pooled[:max_bins], pooled[max_bins:].sum()]
        out[r] = (
            stats.min_detectable_tv(pooled / pooled.sum(), n, alpha=alpha, two_sample=True)
            if pooled.size > 1
            else math.inf
        )
    return out


def draft_plan(
    p1: np.ndarray,
    q1: np.ndarray,
    first: Sequence[int],
    p2: np.ndarray,
    q2: np.ndarray,
    *,
    decode: Any = str,
    max_bins: int = MAX_BINS,
    tv: float = TV,
    alpha: float = ALPHA,
    power: float = POWER,
) -> dict[str, Any]:
    """What a lossless engine that samples drafts from q and verifies with min(1, p/q) will
    show on one prompt, from exact laws: ``p1`` / ``q1`` the target's / draft's first-token
    laws (over the vocabulary), ``first`` the first tokens expanded (ids), ``p2`` / ``q2`` (one
    row per token of ``first``) the laws of the second token after each.

    Returns the first-token law's likeliest values, the law of the first two tokens (its 20
    likeliest outcomes as ``decode``-d pieces, ``uncovered``: the first tokens' mass left out,
    ``singleton_mass``), the predicted acceptance at positions 1 and 2 (position 2 over the
    expanded first tokens: ``accept_pos2`` is a lower bound, ``accept_pos2 + uncovered`` an
    upper one) and :func:`sizes` at positions 1 and 2 on the laws binned as the audit bins
    samples (``max_bins`` outcomes and a tail)."""
    p1, q1 = np.asarray(p1, dtype=float), np.asarray(q1, dtype=float)
    p2, q2 = np.asarray(p2, dtype=float), np.asarray(q2, dtype=float)
    first = [int(t) for t in first]
    if p1.shape != q1.shape or p1.ndim != 1:
        raise ValueError("p1 and q1 must be 1-D laws over the same vocabulary")
    if p2.shape != q2.shape or p2.shape != (len(first), p1.size):
        raise ValueError("p2 and q2 need one row per first token, over the vocabulary")
    if len(set(first)) != len(first):
        raise ValueError("first tokens must be distinct")
    w = p1[first]
    uncovered = max(0.0, 1.0 - float(w.sum()))
    accept1 = float(np.minimum(p1, q1).sum())
    accept2 = float((w * np.minimum(p2, q2).sum(axis=1)).sum())
    joint = (w[:, None] * p2).ravel()
    order = np.argsort(-joint, kind="stable")
    joint_sorted = joint[order]
    nz = joint_sorted > 0
    joint_sorted, order = joint_sorted[nz], order[nz]
    vocab = p1.size

    def piece(t: int) -> str:
        return decode(int(t))

    two = [
        [[piece(first[i // vocab]), piece(i % vocab)], float(p)]
        for i, p in zip(order[:20], joint_sorted[:20], strict=True)
    ]
    law2 = _binned_probs(joint_sorted, uncovered, max_bins)
    order1 = np.argsort(-p1, kind="stable")
    p1_sorted = p1[order1][p1[order1] > 0]
    law1 = _binned_probs(p1_sorted, 0.0, max_bins)
    kw = dict(tv=tv, alpha=alpha, power=power)
    return {
        "first_token": [[piece(t), float(p1[t]), float(q1[t])] for t in order1[:10]],
        "first_two": two,
        "expanded_first_tokens": len(first),
        "uncovered": uncovered,
        "predicted_accept_pos1": accept1,
        "predicted_accept_pos2": accept2,
        "tv_pq_pos1": 1.0 - accept1,
        "position1": sizes(law1, **kw),
        "position2": sizes(law2, **kw),
        "_joint_sorted": joint_sorted,  # for simulated_statement (not written out)
    }


def next_token_laws(
    model: Any,
    ids: Any,
    extra: Sequence[int] = (),
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """A transformers causal LM's law of the next token after ``ids`` (a 1 x L tensor) and,
    for each token t of ``extra``, after ``ids + [t]`` (one batched pass; None without
    ``extra``): float64 numpy arrays, softmax of the float32 logits over ``temperature``,
    then kept to the ``top_k`` likeliest tokens (ties at the k-th logit kept, as transformers'
    top-k keeps them) and renormalised."""
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    import torch

    def law(logits: Any) -> np.ndarray:
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.softmax(logits, -1).double().numpy()

    with torch.no_grad():
        first = model(input_ids=ids).logits[0, -1].float() / temperature
        second = None
        if len(extra):
            batch = torch.cat([ids.repeat(len(extra), 1), torch.tensor(list(extra))[:, None]], 1)
            second = model(input_ids=batch).logits[:, -1].float() / temperature
    return law(first), None if second is None else law(second)
