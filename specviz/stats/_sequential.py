"""Anytime-valid two-sample comparison of discrete laws: a test that may be stopped whenever it
is decided, and a confidence sequence on the total-variation distance between the arms.

Data come in *pairs*: draw ``i`` of arm A with draw ``i`` of arm B (both arms are sampled in
equal batches). Under H0 (one law for both arms) the two draws of a pair are exchangeable.

**The test** (:class:`PairedBettingTest`) is a test martingale built by betting (Shekhar &
Ramdas, arXiv 2112.09162) on a conditional likelihood ratio in the spirit of Lindon & Malek
(arXiv 2011.03567): for a pair with different outcomes ``(x, y)``, H0 makes both orders
equally likely, so the order is a fair coin given the unordered pair. The bet predicts the order
from the counts seen so far (each law smoothed by ``KAPPA`` pseudo-counts),
``r = a_x b_y / (a_x b_y + a_y b_x)``, and stakes a fraction ``lambda`` of the wealth on it:
``W <- W (1 + lambda (2 r - 1) s)``, ``s = +1`` for the order seen. ``lambda`` is learnt by
online Newton steps (ONS), in ``[0, LAMBDA_MAX]``. Whatever the predictions, the wealth has
expectation 1 under H0 at every step, so by Ville's inequality ``P(sup_t W_t >= 1/alpha) <=
alpha``: it can be checked after every batch, or every pair, and stopped at will.

**The equivalence bound** (:class:`TVConfidenceSequence`) is an upper confidence sequence on
``TV(P_A, P_B) = max_S P_A(S) - P_B(S)``. The first batch fixes the bins: its ``MAX_BINS``
commonest outcomes and one tail bin ``T`` (every other outcome, seen or not). For each set
``S`` of common bins, ``V = 1[x in S or T] - 1[y in S]`` has mean ``mu_S >= P_A(S') - P_B(S')``
for every set of outcomes ``S'`` whose common part is ``S`` (the tail part gains at most
``P_A(T)``), so ``TV <= max_S mu_S``. Each hypothesis ``mu_S >= m`` (``m`` on a grid) is tested
by betting against it with the three-valued ``V`` (exact wealth, no Bernstein slack), the stake
chosen by Kelly as if the arms were equal (the case an equivalence stop is for) and shrunk by
``SHRINK``. ``TV >= m`` is the union of these hypotheses, so rejecting it needs every ``S``
rejected, each at level ``alpha`` (the intersection-union principle: no multiplicity
correction). The upper end is the smallest grid value above which every hypothesis is
rejected, kept as a running minimum: ``P(TV >= upper_t for some t) <= alpha``.

Several views (positions of one continuation) and groups (prompts) combine in
:class:`SequentialTwoSample`: views of one group are functions of the same draws, hence
dependent, and their e-values are *averaged* (an average of test martingales on one filtration
is one); groups are sampled independently and their averages *multiply*. "Equivalent" needs the
upper end of every equivalence view of every group below the tolerance (intersection-union
again: no correction).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._results import _Result
from ._validation import _readonly

__all__ = [
    "PairedBettingTest",
    "SequentialResult",
    "SequentialTwoSample",
    "TVConfidenceSequence",
    "check_sequential_settings",
    "sequential_homogeneity",
    "sequential_method",
]

KAPPA = 5.0  # pseudo-counts per outcome in the bet's plug-in laws
LAMBDA_MAX = 0.8  # largest fraction of the wealth staked on one pair
_ONS = 2.0 / (2.0 - math.log(3.0))  # ONS step constant (Cutkosky & Orabona; Shekhar & Ramdas)
MAX_BINS = 12  # common bins of the TV bound: 2**12 sets
SHRINK = 0.7  # fraction of the Kelly stake of the TV bound (the worst set's noise eats ~30%)
_PRIOR = 2.0  # pseudo-pairs in the plug-in P(V != 0) of the TV bound (at 1/2)
_LOG_CAP = 700.0  # e-values are kept as logs; exp() of more overflows


def check_sequential_settings(
    *, alpha: Any, tv_tolerance: Any = None, cap: Any = None, batch: Any = None
) -> None:
    """The level, tolerance, cap and batch of a sequential comparison, before anything runs:
    ``alpha`` and ``tv_tolerance`` in (0, 1), ``batch`` >= 1, ``cap`` >= one batch."""
    for name, value in (("alpha", alpha), ("tv_tolerance", tv_tolerance)):
        if value is None and name == "tv_tolerance":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise TypeError(f"{name} must be a number in (0, 1), got {value!r}")
        if not (math.isfinite(value) and 0 < value < 1):
            raise ValueError(f"{name} must be in (0, 1) (exclusive), got {value!r}")
    for name, value in (("batch", batch), ("cap", cap)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if cap is not None and batch is not None and cap < batch:
        raise ValueError(
            f"the cap ({cap} samples per arm) is below one batch ({batch}): the test checks "
            "after each batch, so raise the cap or lower the batch"
        )


# ------------------------------------------------------------------------------ the test


class PairedBettingTest:
    """e-process for "both arms have one law" from paired discrete draws (see the module
    docstring). ``update`` takes the next draws of each arm (equal lengths, hashable outcomes);
    ``e_value`` is the wealth, ``log_e`` its logarithm."""

    def __init__(self) -> None:
        self.counts_a: dict[Hashable, int] = {}
        self.counts_b: dict[Hashable, int] = {}
        self.n = 0
        self.log_e = 0.0
        self._lam = 0.0
        self._ons_a = 1.0

    @property
    def e_value(self) -> float:
        return math.exp(min(self.log_e, _LOG_CAP))

    def update(self, xs: Sequence[Hashable], ys: Sequence[Hashable]) -> float:
        if len(xs) != len(ys):
            raise ValueError(f"paired draws need equal lengths, got {len(xs)} and {len(ys)}")
        ca, cb = self.counts_a, self.counts_b
        lam, ons_a, log_e = self._lam, self._ons_a, self.log_e
        for x, y in zip(xs, ys, strict=True):
            if x != y:
                # the order (x from A, y from B) predicted from the counts so far
                axby = (ca.get(x, 0) + KAPPA) * (cb.get(y, 0) + KAPPA)
                aybx = (ca.get(y, 0) + KAPPA) * (cb.get(x, 0) + KAPPA)
                g = (axby - aybx) / (axby + aybx)  # = 2 r - 1, in (-1, 1)
                log_e += math.log1p(lam * g)
                z = g / (1.0 + lam * g)  # d/d(lambda) of log(1 + lambda g)
                ons_a += z * z
                lam = min(max(lam + _ONS * z / ons_a, 0.0), LAMBDA_MAX)
            ca[x] = ca.get(x, 0) + 1
            cb[y] = cb.get(y, 0) + 1
        self._lam, self._ons_a, self.log_e = lam, ons_a, log_e
        self.n += len(xs)
        return self.e_value


# ------------------------------------------------------------------------------ the TV bound


def _tv_grid(tv_tolerance: float | None) -> np.ndarray:
    grid = np.r_[np.linspace(0.005, 0.2, 40), np.linspace(0.25, 1.0, 16)]
    if tv_tolerance is not None:
        grid = np.r_[grid, tv_tolerance]
    return np.unique(np.round(grid, 12))


def _kelly(v2: np.ndarray, mu: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Kelly stake on ``Z = (m - V) / 2`` when ``V`` is +1 / -1 with probabilities
    ``(v2 + mu) / 2`` and ``(v2 - mu) / 2`` (else 0): three Newton steps from
    ``E[Z] / E[Z^2]``, kept in [0, 1] (where 1 + lambda Z >= 1/2)."""
    qp = np.clip((v2 + mu) / 2, 0.0, 1.0)
    qm = np.clip((v2 - mu) / 2, 0.0, 1.0)
    q0 = np.clip(1.0 - qp - qm, 0.0, 1.0)
    zp, zm, z0 = (m - 1) / 2, (m + 1) / 2, m / 2
    ez = qp * zp + qm * zm + q0 * z0
    lam = np.clip(ez / (qp * zp**2 + qm * zm**2 + q0 * z0**2 + 1e-12), 0.0, 1.0)
    for _ in range(3):
        d1 = qp * zp / (1 + lam * zp) + qm * zm / (1 + lam * zm) + q0 * z0 / (1 + lam * z0)
        d2 = (
            qp * zp**2 / (1 + lam * zp) ** 2
            + qm * zm**2 / (1 + lam * zm) ** 2
            + q0 * z0**2 / (1 + lam * z0) ** 2
        )
        lam = np.clip(lam + d1 / np.maximum(d2, 1e-12), 0.0, 1.0)
    return lam


_V_STEPS = 200  # resolution of P(V != 0) in the stake table


def _stake_logs(tail: float, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log(1 + lambda Z) for V = -1, 0, +1, per P(V != 0) on a grid (rows) and per tested
    value ``m`` (columns); ``lambda`` is ``SHRINK`` x Kelly as if the arms were equal
    (``E[V] = P(tail)``)."""
    v2 = np.linspace(0.0, 1.0, _V_STEPS + 1)[:, None]
    m = grid[None, :]
    lam = SHRINK * _kelly(v2, np.full_like(v2, tail), m)
    return np.log1p(lam * (m + 1) / 2), np.log1p(lam * m / 2), np.log1p(lam * (m - 1) / 2)


class TVConfidenceSequence:
    """Upper confidence sequence on the TV distance between two arms' laws, from paired
    draws (see the module docstring): ``P(TV >= upper at some time) <= alpha``. The first
    ``update`` only fixes the bins (its draws do not count towards the bound)."""

    def __init__(self, alpha: float, *, tv_tolerance: float | None = None) -> None:
        check_sequential_settings(alpha=alpha, tv_tolerance=tv_tolerance)
        self.alpha = float(alpha)
        self.grid = _tv_grid(tv_tolerance)
        self.bins: dict[Hashable, int] | None = None
        self.n = 0  # pairs counted by the bound (after the first batch)
        self.upper = 1.0

    def _fix_bins(self, xs: Sequence[Hashable], ys: Sequence[Hashable]) -> None:
        pooled: dict[Hashable, int] = {}
        for o in list(xs) + list(ys):
            pooled[o] = pooled.get(o, 0) + 1
        common = sorted(pooled, key=lambda o: -pooled[o])[:MAX_BINS]  # stable: ties by order
        self.bins = {o: i for i, o in enumerate(common)}
        m = len(common)
        idx = np.arange(2**m)
        top = ((idx[:, None] >> np.arange(m)) & 1).astype(float)  # [sets, m]
        self._set_b = np.c_[top, np.zeros(len(idx))]  # y in S
        self._set_a = np.c_[top, np.ones(len(idx))]  # x in S or in the tail
        self._pairs = np.zeros((m + 1, m + 1))  # every pair so far, by bins (burn-in too)
        self._log_w = np.zeros((len(idx), self.grid.size))
        self._rejected = np.zeros(self._log_w.shape, dtype=bool)

    def _codes(self, xs: Sequence[Hashable]) -> np.ndarray:
        tail = len(self.bins)  # type: ignore[arg-type]
        return np.array([self.bins.get(o, tail) for o in xs], dtype=np.int64)  # type: ignore[union-attr]

    def _signs(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per set: number of pairs with V = +1 and with V = -1."""
        plus = ((self._set_a @ pairs) * (1.0 - self._set_b)).sum(1)
        minus = (((1.0 - self._set_a) @ pairs) * self._set_b).sum(1)
        return plus, minus

    def update(self, xs: Sequence[Hashable], ys: Sequence[Hashable]) -> float:
        if len(xs) != len(ys):
            raise ValueError(f"paired draws need equal lengths, got {len(xs)} and {len(ys)}")
        if self.bins is None:
            self._fix_bins(xs, ys)
            self._add(xs, ys)
            return self.upper
        # the stake: Kelly for the pairs seen so far, as if the arms were equal (predictable);
        # P(V != 0) on a grid of 1/_V_STEPS so that the stakes come from one small table
        seen = self._pairs.sum()
        plus, minus = self._signs(self._pairs)
        v2 = (plus + minus + _PRIOR / 2) / (seen + _PRIOR)
        tail = (self._pairs[-1].sum() + self._pairs[:, -1].sum()) / (2 * seen + 2)
        logs = _stake_logs(tail, self.grid)  # 3 x [_V_STEPS + 1, grid]
        row = np.rint(v2 * _V_STEPS).astype(np.int64)
        batch = self._add(xs, ys)
        plus, minus = self._signs(batch)
        zero = len(xs) - plus - minus
        self._log_w += (
            minus[:, None] * logs[0][row]
            + zero[:, None] * logs[1][row]
            + plus[:, None] * logs[2][row]
        )
        self._rejected |= self._log_w >= math.log(1.0 / self.alpha)
        self.n += len(xs)
        self.upper = min(self.upper, self._bound())
        return self.upper

    def _add(self, xs: Sequence[Hashable], ys: Sequence[Hashable]) -> np.ndarray:
        batch = np.zeros_like(self._pairs)
        np.add.at(batch, (self._codes(xs), self._codes(ys)), 1.0)
        self._pairs += batch
        return batch

    def _bound(self) -> float:
        # per set: the smallest grid value from which every larger one is rejected
        above = np.flip(np.logical_and.accumulate(np.flip(self._rejected, 1), 1), 1)
        first = np.where(above.any(1), above.argmax(1), self.grid.size)
        per_set = np.where(
            first < self.grid.size, self.grid[np.minimum(first, self.grid.size - 1)], 1.0
        )
        return float(per_set.max())


# ------------------------------------------------------------------------------ combined


@dataclass(frozen=True, eq=False)
class SequentialResult(_Result):
    """A sequential two-sample comparison where it stopped.

    ``statistic`` is the combined e-value, ``pvalue`` the anytime-valid p-value
    ``min(1, 1 / max e-value so far)``; ``decision`` is ``"reject"`` (e-value >= 1/alpha),
    ``"equivalent"`` (TV upper end <= ``tv_tolerance``) or ``"continue"`` (neither yet: at
    the cap, "inconclusive"). ``n`` is the number of draws per arm used; ``trajectory`` has
    one row per check: draws per arm, e-value, TV upper end (1 before the bound has data).
    """

    statistic: float
    pvalue: float
    n: int
    method: str
    decision: str
    alpha: float
    tv_upper: float
    tv_tolerance: float | None
    trajectory: np.ndarray  # [checks, 3]: n, e-value, TV upper end


class SequentialTwoSample:
    """Several views (dependent: averaged) of several groups (independent: multiplied); see
    the module docstring. ``views`` name the outcomes of one group; ``equivalence_views`` (a
    subset, default all) are the ones "equivalent" speaks about.

    >>> seq = SequentialTwoSample(2, ["token"], alpha=0.01, tv_tolerance=0.2)
    >>> seq.update(0, {"token": ([1, 2, 1], [1, 1, 2])})
    >>> seq.update(1, {"token": ([0, 0, 0], [0, 0, 0])})
    >>> seq.decision, round(seq.e_value, 3)
    ('continue', 1.0)
    """

    def __init__(
        self,
        n_groups: int,
        views: Sequence[str],
        *,
        alpha: float,
        tv_tolerance: float | None = None,
        equivalence_views: Sequence[str] | None = None,
    ) -> None:
        check_sequential_settings(alpha=alpha, tv_tolerance=tv_tolerance)
        if isinstance(n_groups, bool) or not isinstance(n_groups, int) or n_groups < 1:
            raise ValueError(f"n_groups must be an integer >= 1, got {n_groups!r}")
        self.views = tuple(views)
        if not self.views or len(set(self.views)) != len(self.views):
            raise ValueError(f"views must be distinct names, at least one, got {views!r}")
        eq = self.views if equivalence_views is None else tuple(equivalence_views)
        if not set(eq) <= set(self.views):
            raise ValueError(f"equivalence_views {eq!r} are not all among views {self.views!r}")
        self.alpha, self.tv_tolerance = float(alpha), tv_tolerance
        self.tests = [{v: PairedBettingTest() for v in self.views} for _ in range(n_groups)]
        self.bounds = [
            {v: TVConfidenceSequence(alpha, tv_tolerance=tv_tolerance) for v in eq}
            for _ in range(n_groups)
        ]
        self._max_log_e = 0.0

    def update(self, group: int, outcomes: Mapping[str, tuple[Sequence, Sequence]]) -> None:
        """The next paired draws of ``group``: ``{view: (draws of A, draws of B)}``, every
        view of the group given (the same draws seen through each view)."""
        missing = set(self.views) - set(outcomes)
        if missing:
            raise ValueError(f"group {group}: no draws for views {sorted(missing)}")
        for view, (xs, ys) in outcomes.items():
            self.tests[group][view].update(xs, ys)
            if view in self.bounds[group]:
                self.bounds[group][view].update(xs, ys)
        self._max_log_e = max(self._max_log_e, self.log_e)

    @property
    def group_log_e(self) -> list[float]:
        """log of each group's e-value: the average over its views."""
        out = []
        for tests in self.tests:
            logs = np.array([t.log_e for t in tests.values()])
            out.append(float(np.logaddexp.reduce(logs) - math.log(len(logs))))
        return out

    @property
    def log_e(self) -> float:
        return float(sum(self.group_log_e))

    @property
    def e_value(self) -> float:
        return math.exp(min(self.log_e, _LOG_CAP))

    @property
    def pvalue(self) -> float:
        return min(1.0, math.exp(-self._max_log_e))

    @property
    def tv_upper(self) -> float:
        """The largest TV upper end over the equivalence views of every group."""
        return max((b.upper for g in self.bounds for b in g.values()), default=1.0)

    @property
    def decision(self) -> str:
        if self._max_log_e >= math.log(1.0 / self.alpha):
            return "reject"
        if self.tv_tolerance is not None and self.tv_upper <= self.tv_tolerance:
            return "equivalent"
        return "continue"


def sequential_homogeneity(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    *,
    alpha: float = 0.01,
    tv_tolerance: float | None = None,
    batch: int = 100,
) -> SequentialResult:
    """Run the sequential comparison over two streams of draws (paired by position), checking
    after every ``batch`` pairs and stopping at the first decision: reject (the laws differ),
    equivalent (TV below ``tv_tolerance`` at confidence ``1 - alpha``) or the end of the data
    (``decision="continue"``). One view, one group; see :class:`SequentialTwoSample` for more.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a = rng.choice(3, size=3000, p=[0.5, 0.3, 0.2])
    >>> b = rng.choice(3, size=3000, p=[0.2, 0.3, 0.5])
    >>> res = sequential_homogeneity(a.tolist(), b.tolist(), alpha=0.01, batch=50)
    >>> res.decision, res.n < 300
    ('reject', True)
    """
    check_sequential_settings(alpha=alpha, tv_tolerance=tv_tolerance, batch=batch)
    if len(a) != len(b):
        raise ValueError(f"paired draws need equal lengths, got {len(a)} and {len(b)}")
    if len(a) == 0:
        raise ValueError("no draws: a and b are empty")
    seq = SequentialTwoSample(1, ["outcome"], alpha=alpha, tv_tolerance=tv_tolerance)
    rows = []
    n = 0
    for start in range(0, len(a), batch):
        xs, ys = a[start : start + batch], b[start : start + batch]
        seq.update(0, {"outcome": (xs, ys)})
        n += len(xs)
        rows.append((n, seq.e_value, seq.tv_upper))
        if seq.decision != "continue":
            break
    return SequentialResult(
        statistic=seq.e_value,
        pvalue=seq.pvalue,
        n=n,
        method=sequential_method(alpha, tv_tolerance),
        decision=seq.decision,
        alpha=float(alpha),
        tv_upper=seq.tv_upper,
        tv_tolerance=tv_tolerance,
        trajectory=_readonly(np.array(rows, dtype=float).reshape(-1, 3)),
    )


def sequential_method(alpha: float, tv_tolerance: float | None) -> str:
    """How a sequential result was reached, in one line."""
    test = (
        f"anytime-valid paired betting test (conditional order likelihood, ONS stakes), "
        f"reject at e-value >= {1 / alpha:g}"
    )
    if tv_tolerance is None:
        return test
    return (
        f"{test}; TV upper confidence sequence at {1 - alpha:.3g}, equivalent when <= "
        f"{tv_tolerance:g}"
    )
