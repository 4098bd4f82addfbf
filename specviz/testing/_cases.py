"""Exact (p, q) cases: context-free chains and trees whose every emitted position has a known law.

A case fixes the target rows p_0..p_k and the draft rows q_0..q_{k-1}; they do not depend on
the tokens, so for a lossless sampler the token emitted at position j, given that position j
is emitted, has law p_j (whatever happened before: a correct sampler's acceptance at j uses
fresh randomness, and a lossless rule emits p_j either way -- block verification included,
since the law of the block extended by fresh target draws is the target's). Trees generalise
it: the token emitted after node i has law ``p_nodes[i + 1]``. Each family below builds a few
seeded cases of one kind, the kinds where shipped samplers went wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FAMILIES", "Case", "Plan", "TreeShape", "check_law_rows", "family_plan", "restrict"]

#: Every family, in the order the kit runs them (cheap and decisive first).
FAMILIES = (
    "random",
    "peaked",
    "disjoint",
    "equal",
    "zeros",
    "one_hot",
    "long",
    "ragged",
    "rounds",
    "tree",
)


@dataclass(frozen=True)
class TreeShape:
    """Node ``i`` hangs under ``parents[i]`` (-1: the root); siblings are tried in index order."""

    parents: tuple[int, ...]
    sampling: str = (
        "independent"  # how siblings are drawn: independent / without_replacement / deterministic
    )


@dataclass(frozen=True)
class Case:
    """One exact case. Chains: ``p_target`` [k+1, V], ``q_draft`` [k, V]. Trees: ``p_target``
    [n+1, V] (row 0 the root's law, row i+1 the law after node i) and ``q_draft`` [n, V] (node
    i's row: the law its sibling group was drawn from)."""

    name: str
    p_target: np.ndarray
    q_draft: np.ndarray
    deterministic: bool = False  # one-hot drafts: q rows are point masses (q = None where allowed)
    tree: TreeShape | None = None

    @property
    def k(self) -> int:
        return int(self.q_draft.shape[0])

    @property
    def vocab(self) -> int:
        return int(self.p_target.shape[1])


@dataclass(frozen=True)
class Plan:
    """How a family is run: its cases and how rows use them.

    ``layout``: "single" (every row of a call runs one case; a call per case), "mixed" (the
    rows of one call cycle through the cases: different laws, and different chain lengths
    where the signature allows), "rounds" (each stream runs ``cases[0]`` then ``cases[1]``
    with the same generator / state).
    """

    family: str
    cases: tuple[Case, ...]
    layout: str = "single"
    notes: tuple[str, ...] = field(default_factory=tuple)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _chain(rng, vocab, k, scale=1.5, noise=1.0):
    logits = scale * rng.standard_normal((k + 1, vocab))
    return _softmax(logits), _softmax(logits[:k] + noise * rng.standard_normal((k, vocab)))


def _top_k(p: np.ndarray, keep: int) -> np.ndarray:
    out = p.copy()
    np.put_along_axis(out, np.argsort(-p, axis=-1)[:, keep:], 0.0, axis=-1)
    return out / out.sum(-1, keepdims=True)


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-p, axis=-1)
    sorted_p = np.take_along_axis(p, order, -1)
    drop = (np.cumsum(sorted_p, -1) - sorted_p) >= top_p  # the mass above already reaches top_p
    out = p.copy()
    np.put_along_axis(out, order, np.where(drop, 0.0, sorted_p), axis=-1)
    return out / out.sum(-1, keepdims=True)


def _one_hot(tokens: np.ndarray, vocab: int) -> np.ndarray:
    q = np.zeros((tokens.size, vocab))
    q[np.arange(tokens.size), tokens] = 1.0
    return q


def _tree_case(rng, vocab: int, sampling: str) -> Case:
    """Three candidates under the root, one child under each: 6 nodes, 7 target rows."""
    parents = (-1, -1, -1, 0, 1, 2)
    p = _softmax(1.5 * rng.standard_normal((len(parents) + 1, vocab)))
    root_q = _softmax(np.log(p[0]) + rng.standard_normal(vocab))
    q = np.stack([root_q] * 3 + [_softmax(np.log(p[i + 1]) + rng.standard_normal(vocab)) for i in range(3)])  # fmt: skip
    return Case(f"tree-{sampling}", p, q, tree=TreeShape(parents, sampling))


def family_plan(
    family: str, vocab: int, k: int, seed: int, *, tree_sampling: str = "independent"
) -> Plan:
    """The cases of one family (seeded: ``numpy`` ``default_rng([seed, index of the family])``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    rng = np.random.default_rng([seed, FAMILIES.index(family)])
    if family == "random":
        return Plan(family, tuple(Case(f"random-{i}", *_chain(rng, vocab, k)) for i in range(2)))
    if family == "peaked":  # both sharp, on different tokens: acceptance is rare and decisive
        p = _softmax(4.0 * rng.standard_normal((k + 1, vocab)))
        q = _softmax(4.0 * rng.standard_normal((k, vocab)))
        return Plan(family, (Case("peaked", p, q),))
    if family == "disjoint":  # p on the first half of the vocabulary, q on the second
        half = vocab // 2
        p, q = _chain(rng, vocab, k)
        p[:, half:] = 0.0
        q[:, :half] = 0.0
        p /= p.sum(-1, keepdims=True)
        q /= q.sum(-1, keepdims=True)
        return Plan(family, (Case("disjoint", p, q),))
    if family == "equal":  # q = p: every draft accepted, the bonus token always emitted
        p, _ = _chain(rng, vocab, k)
        return Plan(family, (Case("equal", p, p[:k].copy()),))
    if family == "zeros":  # target cut by top-k / top-p; the draft has mass on the cut tokens
        p, _ = _chain(rng, vocab, k)
        q = _softmax(1.5 * rng.standard_normal((k, vocab)))
        keep = max(2, vocab // 3)
        return Plan(family, (Case("top-k", _top_k(p, keep), q), Case("top-p", _top_p(p, 0.7), q)))
    if family == "one_hot":  # deterministic drafts (n-gram, argmax): q is a point mass
        p = _top_k(_chain(rng, vocab, k)[0], max(2, vocab // 2))
        tokens = rng.integers(0, vocab, size=k)  # some fall where p = 0
        return Plan(family, (Case("one-hot", p, _one_hot(tokens, vocab), deterministic=True),))
    if family == "long":  # a long chain with a close draft, so deep positions are emitted
        long_k = max(2 * k, 8)
        return Plan(family, (Case(f"long-{long_k}", *_chain(rng, vocab, long_k, noise=0.5)),))
    if family == "ragged":  # rows of different lengths and laws in one call
        lengths = sorted({1, max(1, k - 1), k})
        cases = tuple(Case(f"ragged-k{kk}", *_chain(rng, vocab, kk)) for kk in lengths)
        return Plan(family, cases, layout="mixed")
    if family == "rounds":  # two rounds of one stream: the second must not remember the first
        a, b = Case("round-1", *_chain(rng, vocab, k)), Case("round-2", *_chain(rng, vocab, k))
        return Plan(family, (a, b), layout="rounds")
    return Plan(family, (_tree_case(rng, vocab, tree_sampling),))


def check_law_rows(x, name: str, rows: int | None = None) -> np.ndarray:
    """A [rows, V] array of probability rows (finite, >= 0, each summing to 1 within 1e-4),
    renormalised in float64; a clear error naming ``name`` and the expected shape otherwise."""
    arr = np.asarray(x.detach().cpu().double() if hasattr(x, "detach") else x, dtype=np.float64)
    want = f"[{rows if rows is not None else 'rows'}, V]"
    if arr.ndim != 2 or (rows is not None and arr.shape[0] != rows) or arr.shape[1] < 2:
        raise ValueError(
            f"{name} must be a {want} array of probabilities (V >= 2), got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} {want} holds NaN or inf")
    if (arr < 0).any():
        raise ValueError(f"{name} {want} holds negative probabilities")
    sums = arr.sum(-1)
    if not np.allclose(sums, 1.0, atol=1e-4):
        bad = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"{name} {want}: row {bad} sums to {sums[bad]:.6g}, not 1")
    return arr / sums[:, None]


def restrict(case: Case, tokens: np.ndarray, k: int) -> Case | None:
    """``case`` cut to its first ``k`` drafts (chains; a tree keeps its shape) and to the
    vocabulary ``tokens`` (renormalised); None when a row would lose all its mass."""
    k = case.k if case.tree is not None else k
    rows = case.p_target.shape[0] if case.tree is not None else k + 1
    p = case.p_target[:rows][:, tokens]
    q = case.q_draft[:k][:, tokens]
    if (p.sum(-1) <= 0).any() or (q.sum(-1) <= 0).any():
        return None
    p = p / p.sum(-1, keepdims=True)
    q = q / q.sum(-1, keepdims=True)
    return Case(f"{case.name}|V={tokens.size},k={k}", p, q, case.deterministic, case.tree)
