"""The shipped mistakes' stated effects: exact (or simulated) laws on a stated chain setting.

Several members of :mod:`specviz.verification.shipped` only show past the first position, the
first round or the first row, so they are stated on a *context-free chain* -- target rows
p_0..p_k and draft rows q_0..q_{k-1} that do not depend on the tokens, the setting of the
conformance kit (:mod:`specviz.testing`) -- rather than on the first wing's one-position toy.
For each member :func:`shipped_law` gives the outcome the mistake moves, the law the lossless
rule gives it (``expected``) and the member's law there, exactly where a closed form or a
finite enumeration exists and by a seeded simulation of the same mechanism otherwise;
:func:`sample_shipped` draws the same outcome by running the member's verifier code, so the
stated numbers describe what the code does (``tests/test_shipped_zoo.py``).

>>> law = shipped_law("ensemble")
>>> round(law.tv, 4) == round(0.5 * float(abs(law.setting.p_a[0] - law.setting.q_a[0]).sum() / 2), 4)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import torch

from ..stats import goodness_of_fit, sample_size_for_laws, simulated_power
from ..verification.shipped import SHIPPED_ZOO, shipped_verifier

__all__ = [
    "ShippedLaw",
    "StatedChain",
    "expected_plugin_tv",
    "markdown_table_shipped",
    "plugin_tv_range",
    "sample_shipped",
    "shipped_effects",
    "shipped_measured",
    "shipped_law",
    "stated_chain_setting",
]


@dataclass(frozen=True)
class StatedChain:
    """Two context-free chains (A, B) of ``k`` drafts over ``V`` tokens, and a chain Z whose
    target has zeros (top-3 truncated) where its draft has mass."""

    p_a: np.ndarray  # [k+1, V]
    q_a: np.ndarray  # [k, V]
    p_b: np.ndarray
    q_b: np.ndarray
    p_z: np.ndarray
    q_z: np.ndarray


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@cache
def stated_chain_setting(vocab: int = 8, k: int = 3, seed: int = 13) -> StatedChain:
    """The stated setting: target logits N(0, 1.5^2) per position, the draft the target plus
    N(0, 1) logit noise (acceptance ~0.7-0.8 per position); chain Z's target keeps its top 3
    tokens and its draft is independent (mass on the cut tokens). ``numpy`` seed ``seed``."""
    rng = np.random.default_rng(seed)

    def chain():
        logits = 1.5 * rng.standard_normal((k + 1, vocab))
        return _softmax(logits), _softmax(logits[:k] + rng.standard_normal((k, vocab)))

    p_a, q_a = chain()
    p_b, q_b = chain()
    p_z, _ = chain()
    q_z = _softmax(1.5 * rng.standard_normal((k, vocab)))  # a draft unaware of the cut
    cut = np.argsort(-p_z, axis=-1)[:, 3:]  # keep each row's top 3 tokens (top-k = 3)
    np.put_along_axis(p_z, cut, 0.0, axis=-1)
    p_z /= p_z.sum(-1, keepdims=True)
    return StatedChain(p_a, q_a, p_b, q_b, p_z, q_z)


@dataclass(frozen=True)
class ShippedLaw:
    """One member's stated effect: the law of ``outcome`` under the member and under the
    lossless rule, their TV, and the samples a Pearson test at alpha = 0.01 needs for 90%
    power (or, where the member emits impossible tokens, the samples until one shows up with
    probability 0.9)."""

    verifier: str
    outcome: str
    expected: np.ndarray
    law: np.ndarray
    kind: str  # "exact" or "simulated (N draws)"
    setting: StatedChain
    tv: float
    n_to_detect: float  # inf for a lossless member


def _accept(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r = np.clip(p - q, 0.0, None)
    return r / r.sum() if r.sum() > 0 else p


def _mix(q: np.ndarray, a: np.ndarray, correction: np.ndarray) -> np.ndarray:
    """Law of the first token: the draft x ~ q kept with probability a(x), else ``correction``."""
    return q * a + (q * (1.0 - a)).sum() * correction


def _inverse_cdf(law: np.ndarray, w: float) -> int:
    """The token :func:`specviz.core.sampling.sample_with_uniform` draws with uniform w."""
    cdf = np.cumsum(law)
    idx = int(np.searchsorted(cdf, w * cdf[-1], side="right"))
    return idx if idx < law.size else int(np.flatnonzero(law > 0)[-1])


def _rng_reset_pair(s: StatedChain) -> np.ndarray:
    """Exact law of (round-1 first token under A, round-2 first token under B) when both
    rounds use the same uniforms (u_0 decides position 0, u_k draws the correction): both
    tokens are piecewise constant in (u_0, u_k), so summing over the rectangles between the
    breakpoints is exact."""
    V = s.p_a.shape[1]
    rules = []
    for p, q in ((s.p_a, s.q_a), (s.p_b, s.q_b)):
        rules.append((q[0], _accept(p[0], q[0]), _residual(p[0], q[0])))
    ub = np.unique(np.concatenate([[0.0, 1.0], rules[0][1], rules[1][1]]).clip(0, 1))
    wb = np.unique(np.concatenate([[0.0, 1.0], *[np.cumsum(r[2]) for r in rules]]).clip(0, 1))
    out = np.zeros((V, V))
    for u0, u1 in zip(ub[:-1], ub[1:], strict=True):
        um = 0.5 * (u0 + u1)
        for w0, w1 in zip(wb[:-1], wb[1:], strict=True):
            wm, area = 0.5 * (w0 + w1), (u1 - u0) * (w1 - w0)
            first = []
            for q, a, r in rules:  # the law of each round's first token on this rectangle
                law = np.zeros(V)
                law[um < a] += q[um < a]
                law[_inverse_cdf(r, wm)] += q[um >= a].sum()
                first.append(law)
            out += area * np.outer(first[0], first[1])
    return out.reshape(-1)


def _simulate_shared_noise(p, q, n, rng) -> np.ndarray:
    """First token when the recovery reuses the draft's exponential-race noise: E ~ Exp(1)^V,
    x = argmax(q / E), kept with probability a(x), else argmax(r / E) with the same E."""
    e = rng.exponential(size=(n, p.size))
    x = np.argmax(q / e, axis=1)
    r = np.clip(p - q, 0.0, None)
    y = np.argmax(np.where(r > 0, r / e, -1.0), axis=1)
    keep = rng.random(n) < _accept(p, q)[x]
    return np.bincount(np.where(keep, x, y), minlength=p.size) / n


def _simulate_block_cumprod(p, q, n, rng) -> np.ndarray:
    """First token under vllm-ascend's cumprod block rule (see block.verify_block_cumprod)."""
    k, V = q.shape
    x = np.stack([rng.choice(V, size=n, p=q[i]) for i in range(k)], 1)  # [n, k]
    ratio = np.stack([_accept(p[i], q[i])[x[:, i]] for i in range(k)], 1)
    legal = np.cumprod(ratio, 1) >= np.cumprod(rng.random((n, k)), 1)
    tau = np.where(legal.any(1), k - np.argmax(legal[:, ::-1], 1), 0)
    res = _residual(p[0], q[0])
    y = np.where(tau >= 1, x[:, 0], rng.choice(V, size=n, p=res))
    return np.bincount(y, minlength=V) / n


_SIMULATED = 1_000_000  # draws behind a simulated law (TV error ~ 2e-3 at V = 8)


def _law_of(name: str, s: StatedChain) -> tuple[str, np.ndarray, np.ndarray, str]:
    """(outcome, expected, law, kind) for one member on the stated setting."""
    p, q = s.p_a[0], s.q_a[0]
    a = _accept(p, q)
    exact, first = "exact", "first token of chain A"
    base, _, arg = name.partition(":")
    if base == "independent_target_ratio":
        with np.errstate(divide="ignore"):
            ratio = np.minimum(1.0, q[:, None] / np.where(p > 0, p, np.inf)[None, :])
        return first, p, _mix(q, (ratio * p[None, :]).sum(1), p), exact
    if base == "quantized_uniform":
        levels = int(arg or 101)
        pz, qz = s.p_z[0], s.q_z[0]
        acc = (np.floor(_accept(pz, qz) * (levels - 1) + 1e-12) + 1) / levels
        return "first token of chain Z (top-3 target)", pz, _mix(qz, acc, _residual(pz, qz)), exact
    if base == "one_position_late":
        return first, p, _mix(q, a, s.p_a[1]), exact
    if base == "softmax_residual":
        e = np.exp(np.clip(p - q, 0.0, None))
        return first, p, _mix(q, a, e / e.sum()), exact
    if base == "shared_noise":
        rng = np.random.default_rng(0)
        return (
            first,
            p,
            _simulate_shared_noise(p, q, _SIMULATED, rng),
            f"simulated ({_SIMULATED:,} draws)",
        )
    if base == "rng_reset_each_round":
        pair = np.outer(s.p_a[0], s.p_b[0]).reshape(-1)
        return (
            "(round 1 first token under A, round 2 first token under B)",
            pair,
            _rng_reset_pair(s),
            exact,
        )
    if base == "stale_q":
        pb, qb = s.p_b[0], s.q_b[0]
        law = _mix(qb, _accept(pb, qb), _residual(pb, s.q_a[0]))
        return "first token of chain B in the round after chain A", pb, law, exact
    if base == "ragged_row_permutation":  # row 0 is decided on row 1's third slot (B's row 2)
        pb, qb = s.p_b[2], s.q_b[2]
        kept = np.minimum(pb, qb).sum()  # row 0 keeps its own draft at B's acceptance rate
        law = kept * q + (1.0 - kept) * _residual(pb, qb)
        return "first token of row 0 (chain A cut to 1 draft) next to row 1 (chain B, 3 drafts)", p, law, exact  # fmt: skip
    if base == "block_verify":
        return first, p, p.copy(), "exact (lossless: Sun et al. Thm 1)"
    if base == "block_verify_cumprod":
        rng = np.random.default_rng(1)
        law = _simulate_block_cumprod(s.p_a, s.q_a, _SIMULATED, rng)
        return first, p, law, f"simulated ({_SIMULATED:,} draws)"
    if base == "ensemble":
        w = float(arg or 0.5)
        return first, p, w * p + (1 - w) * q, exact
    raise ValueError(f"no stated law for {name!r}; choose from {sorted(SHIPPED_ZOO)}")  # fmt: skip


def _n_to_detect(expected: np.ndarray, law: np.ndarray, tv: float) -> float:
    """Samples for 90% power at alpha = 0.01: the analytic Pearson estimate, and below 200
    samples (where a near-zero target probability makes the noncentral approximation overstate
    power) from there up in x1.2 steps, at least 20, until the test's simulated power (400
    seeded replicates) reaches 0.9. A member that emits target-impossible tokens is refuted by
    the first one: n with P(one seen) >= 0.9."""
    if tv < 1e-9:
        return math.inf
    impossible = float(law[expected == 0].sum())
    if impossible > 0:
        return float(math.ceil(math.log(0.1) / math.log1p(-impossible)))
    n = max(20, sample_size_for_laws(expected, law, alpha=0.01, power=0.9))
    rng = np.random.default_rng(0)
    while (
        n < 200
        and simulated_power(expected, law, n, alpha=0.01, replicates=400, rng=rng).estimate < 0.9
    ):
        n = math.ceil(1.2 * n)
    return float(n)


@cache
def shipped_law(name: str, vocab: int = 8, k: int = 3, seed: int = 13) -> ShippedLaw:
    """The stated effect of one shipped mistake (see the module docstring)."""
    shipped_verifier(name)  # a clear error for an unknown name
    s = stated_chain_setting(vocab, k, seed)
    outcome, expected, law, kind = _law_of(name, s)
    law = law / law.sum()
    tv = float(0.5 * np.abs(expected - law).sum())
    tv = 0.0 if tv < 1e-12 else tv
    return ShippedLaw(name, outcome, expected, law, kind, s, tv, _n_to_detect(expected, law, tv))


# -- the same outcomes, drawn through the members' code ------------------------------------


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def _drafts(q: np.ndarray, n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(_t(q), n, replacement=True, generator=gen).T  # [n, k]


def _first(v: Any, toks: torch.Tensor) -> int:
    return int(toks[0]) if v.num_accepted >= 1 else int(v.next_token)


def sample_shipped(name: str, n: int, seed: int = 0, *, vocab: int = 8, k: int = 3) -> np.ndarray:
    """Counts of the stated outcome of ``name`` over ``n`` independent draws, each produced by
    the member's own verifier (one generator per stream, seeded ``seed * 1_000_003 + i``;
    drafts drawn from q with a generator seeded ``seed``)."""
    spec = shipped_verifier(name)
    s = stated_chain_setting(vocab, k)
    law = shipped_law(name, vocab, k)
    gen = torch.Generator().manual_seed(int(seed))
    counts = np.zeros(law.law.size, dtype=np.int64)
    base = name.partition(":")[0]
    chain = {"quantized_uniform": (s.p_z, s.q_z), "stale_q": (s.p_b, s.q_b)}.get(
        base, (s.p_a, s.q_a)
    )
    p_t, q_t = _t(chain[0]), _t(chain[1])
    dr = _drafts(chain[1], n, gen)
    other = _drafts(s.q_b if base != "stale_q" else s.q_a, n, gen)
    for i in range(n):
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + i)
        if base == "rng_reset_each_round":
            y1 = _first(spec.verify(dr[i], q_t, p_t, g), dr[i])
            y2 = _first(spec.verify(other[i], _t(s.q_b), _t(s.p_b), g), other[i])
            counts[y1 * vocab + y2] += 1
        elif base == "stale_q":  # round 1 under A, then the stated round under B
            spec.verify(other[i], _t(s.q_a), _t(s.p_a), g)
            counts[_first(spec.verify(dr[i], q_t, p_t, g), dr[i])] += 1
        elif base == "ragged_row_permutation":
            g2 = torch.Generator().manual_seed(int(seed) * 1_000_003 + n + i)
            rows = spec.verify_rows([dr[i][:1], other[i]], [q_t[:1], _t(s.q_b)], [p_t[:2], _t(s.p_b)], [g, g2])  # fmt: skip
            counts[_first(rows[0], dr[i][:1])] += 1
        else:
            counts[_first(spec.verify(dr[i], q_t, p_t, g), dr[i])] += 1
    return counts


def shipped_effects() -> Any:
    """A DataFrame (index: verifier) of every shipped mistake's stated effect."""
    import pandas as pd

    rows = []
    for name, spec in SHIPPED_ZOO.items():
        law = shipped_law(name)
        rows.append(dict(verifier=name, lossless=spec.lossless, outcome=law.outcome,
                         law=law.kind, tv=law.tv, n_to_detect=law.n_to_detect,
                         mistake=spec.description))  # fmt: skip
    return pd.DataFrame(rows).set_index("verifier")


def expected_plugin_tv(law: np.ndarray, expected: np.ndarray, n: int) -> float:
    """The mean plug-in TV ``0.5 sum_i |X_i / n - expected_i|`` of ``n`` draws from ``law``
    (``X_i ~ Binomial(n, law_i)``), computed exactly from the binomial laws.

    The plug-in TV of a finite sample is biased upward: even a sampler that follows
    ``expected`` exactly shows a TV of order ``sqrt(K / n)``. This is the number a measured TV
    should be read against -- what the prediction says the measurement will be at this ``n``
    -- rather than the law's TV itself (notebook 04 printed a lossless member's "predicted
    0.0000, measured 0.0645" with nothing to say 0.06 is what 400 exact draws give).

    >>> p = np.array([0.5, 0.5])
    >>> round(expected_plugin_tv(p, p, 1), 3)  # one draw: |1 - 0.5| always
    0.5
    >>> round(expected_plugin_tv(np.array([1.0, 0.0]), p, 100), 3)  # no noise: the law's TV
    0.5
    """
    from scipy.stats import binom

    law = np.asarray(law, dtype=float)
    expected = np.asarray(expected, dtype=float)
    k = np.arange(n + 1)
    total = 0.0
    for li, ei in zip(law, expected, strict=True):
        if li <= 0.0 or li >= 1.0:  # a point mass: X_i is 0 or n
            total += abs(min(max(li, 0.0), 1.0) - ei)
            continue
        total += float(np.dot(binom.pmf(k, n, li), np.abs(k / n - ei)))
    return float(0.5 * total)


def plugin_tv_range(
    law: np.ndarray,
    expected: np.ndarray,
    n: int,
    *,
    quantiles: tuple[float, float] = (0.05, 0.95),
    reps: int = 4000,
    seed: int = 0,
) -> tuple[float, float]:
    """The range that holds the plug-in TV of ``n`` draws from ``law`` (against ``expected``)
    in ``quantiles`` of runs, from ``reps`` seeded multinomial samples: the spread around
    :func:`expected_plugin_tv`, so a measured TV away from its expected mark can be read as
    sampling noise or not.

    >>> p = np.array([0.5, 0.5])
    >>> plugin_tv_range(np.array([1.0, 0.0]), p, 100)  # no noise: the law's TV every time
    (0.5, 0.5)
    >>> lo, hi = plugin_tv_range(p, p, 100)
    >>> 0.0 <= lo < expected_plugin_tv(p, p, 100) < hi < 0.2
    True
    """
    law = np.clip(np.asarray(law, dtype=float), 0.0, None)
    expected = np.asarray(expected, dtype=float)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, law / law.sum(), size=reps)  # [reps, K]
    tvs = 0.5 * np.abs(counts / n - expected).sum(axis=1)
    lo, hi = np.quantile(tvs, quantiles)
    return float(lo), float(hi)


def shipped_measured(n: int, seed: int = 0) -> Any:
    """Predicted vs measured, per member: the stated law's TV next to the plug-in TV of ``n``
    draws of the stated outcome through the member's code, the goodness-of-fit p-value of those
    draws against the lossless law, and whether a test at alpha = 0.01 caught it.

    Two columns say how to read the measured TV: ``expected_measured_tv``, the plug-in TV that
    ``n`` draws from the member's stated law give on average (:func:`expected_plugin_tv`; the
    plug-in is biased upward, so "measured above predicted" is what a correct prediction
    looks like at a small ``n``), with ``expected_low`` / ``expected_high`` holding 90% of such
    runs (:func:`plugin_tv_range`), and ``impossible``, the draws that landed on an outcome the
    lossless law gives probability 0 (one such draw refutes the sampler on its own, which is
    why such a member needs few draws even at a tiny TV).

    A lossless member the test flags gets a second, independent sample of ``n`` draws
    (``seed + 1``) in ``recheck_pvalue`` (NaN otherwise): a false alarm at alpha = 0.01 happens
    once in 100 checks and does not repeat, a real departure does."""
    import pandas as pd

    rows = []
    for name, spec in SHIPPED_ZOO.items():
        law = shipped_law(name)
        counts = sample_shipped(name, n, seed)
        pvalue = goodness_of_fit(counts, law.expected).pvalue
        recheck = math.nan
        if spec.lossless and pvalue < 0.01:
            recheck = goodness_of_fit(sample_shipped(name, n, seed + 1), law.expected).pvalue
        low, high = plugin_tv_range(law.law, law.expected, n, seed=seed)
        rows.append(dict(verifier=name, lossless=spec.lossless, law=law.kind, predicted_tv=law.tv,
                         measured_tv=float(0.5 * np.abs(counts / n - law.expected).sum()),
                         expected_measured_tv=expected_plugin_tv(law.law, law.expected, n),
                         expected_low=low, expected_high=high,
                         impossible=int(np.asarray(counts)[law.expected == 0].sum()),
                         n_to_detect=law.n_to_detect, n=n, pvalue=pvalue, caught=pvalue < 0.01,
                         recheck_pvalue=recheck))  # fmt: skip
    return pd.DataFrame(rows).set_index("verifier")


def markdown_table_shipped() -> str:
    """The stated table of docs/bug_zoo.md (``python -m specviz.effects``)."""
    lines = [
        "| verifier | outcome | law | TV | n to detect | mistake (source) |",
        "|---|---|---|---:|---:|---|",
    ]
    for name, row in shipped_effects().iterrows():
        n = "-" if math.isinf(row.n_to_detect) else f"{int(row.n_to_detect):,}"
        lines.append(
            f"| `{name}` | {row.outcome} | {row.law} | {row.tv:.4f} | {n} | {row.mistake} |"
        )
    return "\n".join(lines)
