"""How many tokens to draft: gamma policies, live and replayed.

A policy is asked before every target call how many drafts it wants (0 = a plain decoding
step) and told afterwards how the call went. Pass one as
``speculative_generate(..., gamma=policy)``; an ``int`` keeps the fixed-gamma behaviour.

Policies only decide *how many* tokens are drafted, never how they are verified, so every
live policy is lossless: the accept/reject rule is applied unchanged to whatever was drafted.
(:class:`ConfidenceStop` stops the draft model early on its own ``q_draft``, which depends
only on the context -- the same argument.)

* :class:`ConstantGamma` -- the classic fixed gamma.
* :class:`HeuristicGamma` -- transformers' ``num_assistant_tokens_schedule="heuristic"``:
  +2 after a fully accepted draft, -1 otherwise.
* :class:`ConfidenceStop` -- stop drafting when the draft's top probability falls below a
  threshold (DISCO / transformers' ``assistant_confidence_threshold`` idea).
* :class:`AcceptanceEMA` -- tracks acceptance and the draft cost ratio, drafts the gamma that
  maximises the predicted speedup, and falls back to plain decoding when that speedup drops
  below 1 (or the batch is too large), probing now and then to notice recovery.
* :class:`BatchFallback` -- a fixed gamma while few rows share a model call, plain decoding
  above ``max_batch`` rows (the batched engine and load generator set ``batch_size``).

The *policy lab* (:func:`replay`, :func:`compare_policies`) replays a recorded run offline:
given, for every generated position, whether a draft there would have been accepted (and the
draft's confidence), it runs any policy against a cost model in microseconds, so policies
can be compared on the very same text before running them live.

>>> pol = HeuristicGamma(initial=3)
>>> pol.start(); pol.next_gamma()
3
>>> pol.update(drafted=3, accepted=3, draft_time=0.0, verify_time=0.0); pol.next_gamma()
5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from .drafters import Draft, ModelDrafter, _draft_step
from .sampling import logits_to_probs
from .theory import VerifyCost, optimal_gamma, speedup_positional

__all__ = [
    "GammaPolicy",
    "ConstantGamma",
    "HeuristicGamma",
    "ConfidenceStop",
    "ConfidenceStopDrafter",
    "AcceptanceEMA",
    "BatchFallback",
    "as_policy",
    "TokenRecord",
    "record_from_trace",
    "record_teacher_forced",
    "ReplayCost",
    "ReplayResult",
    "replay",
    "compare_policies",
    "run_live",
]


@runtime_checkable
class GammaPolicy(Protocol):
    name: str

    def start(self) -> None:
        """Reset per-generation state (called once at the start of every generation)."""
        ...

    def next_gamma(self) -> int:
        """Drafts wanted for the next target call (0 = plain decoding step)."""
        ...

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        """What the last call did: drafts proposed and accepted, seconds spent."""
        ...


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class _Base:
    name = "policy"
    max_gamma = 0

    def start(self) -> None:
        pass

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        pass

    def draft_length(self, gamma: int, top_probs: Sequence[float]) -> int:
        """Replay only: how many of ``gamma`` drafts the drafter would actually propose given
        the draft's top probabilities at the next positions (all of them, by default)."""
        return gamma

    def __repr__(self) -> str:
        return self.name


class ConstantGamma(_Base):
    """Always ``gamma`` drafts (what ``gamma=int`` does)."""

    def __init__(self, gamma: int) -> None:
        self.gamma = _count("gamma", gamma, 0)
        self.max_gamma = gamma
        self.name = f"constant({gamma})"

    def next_gamma(self) -> int:
        return self.gamma


class HeuristicGamma(_Base):
    """transformers' heuristic schedule: +``up`` after a fully accepted draft, -``down``
    otherwise, within [min_gamma, max_gamma]. Starts at ``initial`` every generation."""

    def __init__(
        self,
        initial: int = 5,
        *,
        up: int = 2,
        down: int = 1,
        min_gamma: int = 1,
        max_gamma: int = 16,
    ) -> None:
        self.initial = _count("initial", initial, 1)
        self.up, self.down = _count("up", up, 0), _count("down", down, 0)
        self.min_gamma = _count("min_gamma", min_gamma, 1)
        self.max_gamma = _count("max_gamma", max_gamma, self.min_gamma)
        self.name = f"heuristic(+{up}/-{down}, start {initial})"
        self.start()

    def start(self) -> None:
        self.gamma = min(max(self.initial, self.min_gamma), self.max_gamma)

    def next_gamma(self) -> int:
        return self.gamma

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        if drafted == 0:
            return
        step = self.up if accepted == drafted else -self.down
        self.gamma = min(max(self.gamma + step, self.min_gamma), self.max_gamma)


class ConfidenceStopDrafter:
    """A model drafter that stops proposing at the first position (after ``min_tokens``)
    whose draft distribution has top probability below ``threshold`` (with greedy decoding,
    the top probability of the draft's plain softmax).

    The stop looks only at ``q_draft`` of the next position -- a function of the context --
    before that position's token is drawn, so the proposal law of the drafted tokens is
    unchanged and verification stays exactly lossless.
    """

    def __init__(self, inner: ModelDrafter, threshold: float, min_tokens: int = 1) -> None:
        if not isinstance(inner, ModelDrafter):
            raise TypeError(
                f"ConfidenceStop needs a model drafter (it reads q_draft), got {type(inner).__name__}"
            )
        self.inner = inner
        self.model = inner.model
        self.threshold = threshold
        self.min_tokens = min_tokens
        self.name = f"{inner.name}+stop(top<{threshold})"
        self.stopped_early = 0

    def start(self, prompt: torch.Tensor, params: Any) -> None:
        self.inner.start(prompt, params)

    def feedback(self, num_accepted: int) -> None:
        self.inner.feedback(num_accepted)

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        d = self.inner
        pending = d._sync(context)
        logits = d.runner.extend(pending, 1)[-1]  # [V]
        fed = [d._fed, pending.cpu()]
        tokens, qs = [], []
        for i in range(k):
            if i >= self.min_tokens:
                # Greedy "probabilities" are one-hot: judge confidence on the raw softmax.
                q = (
                    torch.softmax(logits.float(), dim=-1)
                    if d.params.is_greedy
                    else logits_to_probs(logits, d.params)
                )
                top = float(q.max())  # one host sync per drafted token, inherent to the rule
                if top < self.threshold:
                    self.stopped_early += 1
                    break
            tok, q = _draft_step(logits, d.params, d.mode, generator)
            tokens.append(tok)
            qs.append(q)
            if i + 1 < k:
                logits = d.runner.extend(tok.view(1), 1)[-1]
                fed.append(tok.view(1).cpu())
        d._fed = torch.cat(fed)
        if not tokens:
            return Draft(torch.empty(0, dtype=torch.long))
        return Draft(torch.stack(tokens).cpu(), torch.stack(qs))


class ConfidenceStop(_Base):
    """Draft up to ``gamma`` tokens, stopping where the draft's top probability < threshold.

    Live, the engine wraps a model drafter in :class:`ConfidenceStopDrafter`; in replay,
    :meth:`draft_length` applies the same rule to recorded top probabilities.
    """

    def __init__(self, gamma: int = 8, threshold: float = 0.4, *, min_tokens: int = 1) -> None:
        self.max_gamma = _count("gamma", gamma, 1)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.threshold = threshold
        self.min_tokens = _count("min_tokens", min_tokens, 0)
        self.name = f"confidence(top<{threshold}, max {gamma})"

    def next_gamma(self) -> int:
        return self.max_gamma

    def wrap_drafter(self, drafter: Any) -> ConfidenceStopDrafter:
        return ConfidenceStopDrafter(drafter, self.threshold, self.min_tokens)

    def draft_length(self, gamma: int, top_probs: Sequence[float]) -> int:
        for i in range(gamma):
            if i >= self.min_tokens and i < len(top_probs) and top_probs[i] < self.threshold:
                return i
        return gamma


class AcceptanceEMA(_Base):
    """Drafts the gamma that maximises the predicted speedup under the current estimates,
    or nothing (plain decoding) when that speedup is below ``min_speedup`` or the batch is
    larger than ``max_batch``.

    Acceptance is an exponential moving average over every evaluated draft position (the
    causal prefix plus the first rejection); c is an EMA of (draft seconds per token) /
    (seconds per plain step) once plain steps have been seen, otherwise of (draft seconds per
    token) / (verify seconds), or the fixed ``c`` given. While falling back, every
    ``probe_every``-th step drafts one token so a recovery is noticed.
    """

    def __init__(
        self,
        max_gamma: int = 8,
        *,
        prior: float = 0.6,
        weight: float = 0.15,
        c: float | None = None,
        c_prior: float = 0.2,
        min_speedup: float = 1.0,
        probe_every: int = 8,
        batch_size: int = 1,
        max_batch: int | None = None,
        verify_cost: VerifyCost | None = None,
    ) -> None:
        self.max_gamma = _count("max_gamma", max_gamma, 1)
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        self.prior, self.weight = prior, weight
        self.c_fixed, self.c_prior = c, c_prior
        self.min_speedup = min_speedup
        self.probe_every = _count("probe_every", probe_every, 1)
        self.batch_size = _count("batch_size", batch_size, 1)
        self.max_batch = max_batch
        self.verify_cost = verify_cost
        self.name = f"acceptance-EMA(max {max_gamma})"
        self.start()

    def start(self) -> None:
        self.alpha = self.prior
        self.c = self.c_fixed if self.c_fixed is not None else self.c_prior
        self.plain_step: float | None = None
        self._plain_run = 0
        self.fallbacks = 0  # plain steps taken because speculation was predicted not to pay

    def predicted_speedup(self, gamma: int) -> float:
        v = self.verify_cost.ratio(gamma + 1) if self.verify_cost is not None else 1.0
        if gamma == 0:
            return 1.0
        return speedup_positional([self.alpha] * gamma, self.c, v)

    def next_gamma(self) -> int:
        if self.max_batch is not None and self.batch_size > self.max_batch:
            self.fallbacks += 1
            return 0
        g = optimal_gamma(
            self.alpha, self.c, max_gamma=self.max_gamma, verify_cost=self.verify_cost
        )
        if g == 0 or self.predicted_speedup(g) < self.min_speedup:
            self._plain_run += 1
            if self._plain_run % self.probe_every == 0:
                return 1
            self.fallbacks += 1
            return 0
        self._plain_run = 0
        return g

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        w = self.weight
        if drafted == 0:
            if verify_time > 0:
                self.plain_step = (
                    verify_time
                    if self.plain_step is None
                    else (1 - w) * self.plain_step + w * verify_time
                )
            return
        for x in [1.0] * accepted + ([0.0] if accepted < drafted else []):
            self.alpha = (1 - w) * self.alpha + w * x
        if self.c_fixed is None and draft_time > 0:
            denom = self.plain_step if self.plain_step else verify_time
            if denom > 0:
                self.c = (1 - w) * self.c + w * (draft_time / drafted) / denom


class BatchFallback(_Base):
    """``gamma`` drafts while at most ``max_batch`` rows share a model call, plain decoding
    above that: the article's "fall back to plain decoding at high load" as a rule of thumb
    (a batched server is compute bound sooner, and then verifying drafts costs more than it
    saves). :func:`specviz.batch.speculative_generate_batch` updates ``batch_size`` before
    every call; the serial engine leaves it at 1.
    """

    def __init__(self, gamma: int = 4, max_batch: int = 2) -> None:
        self.gamma = _count("gamma", gamma, 1)
        self.max_gamma = gamma
        self.max_batch = _count("max_batch", max_batch, 1)
        self.batch_size = 1
        self.fallbacks = 0
        self.name = f"fallback(gamma {gamma}, plain above batch {max_batch})"

    def start(self) -> None:
        self.batch_size = 1
        self.fallbacks = 0

    def next_gamma(self) -> int:
        if self.batch_size > self.max_batch:
            self.fallbacks += 1
            return 0
        return self.gamma


def as_policy(gamma: int | GammaPolicy) -> GammaPolicy:
    """An int becomes :class:`ConstantGamma`; a policy object is checked and returned."""
    if isinstance(gamma, int) and not isinstance(gamma, bool):
        return ConstantGamma(_count("gamma", gamma, 1))
    if all(hasattr(gamma, m) for m in ("next_gamma", "update")):
        return gamma
    raise ValueError(
        f"gamma must be an integer >= 1 or a policy with next_gamma()/update(), got {gamma!r}"
    )


# -- the policy lab ----------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRecord:
    """Per generated position t: the probability that a draft *at t* (its prefix being the
    committed text) is accepted, and the draft's top probability there.

    From a greedy run with a model drafter these are exact 0/1 facts, independent of where a
    step starts (the draft sees the same prefix whatever the step boundaries), so a replay
    reproduces the live run's steps and accepted counts; only the draft's confidence *past a
    rejection* (where the live draft conditions on its own wrong token) is not in the record,
    so :class:`ConfidenceStop` may draft a different number of doomed tokens there. For
    sampled runs and context-window drafters (n-gram) the record is an approximation.
    """

    accept: tuple[float, ...]
    top_prob: tuple[float, ...]  # NaN where unknown
    source: str = ""


def record_from_trace(trace: Any, *, fill: float | None = None) -> TokenRecord:
    """A :class:`TokenRecord` from a traced run. Positions no draft was evaluated at (bonus
    tokens) get ``fill`` (default: the run's acceptance rate)."""
    n_tokens = sum(len(s.emitted) for s in trace.steps)
    accept: list[float | None] = [None] * n_tokens
    top: list[float] = [math.nan] * n_tokens
    for s in trace.steps:
        for p in s.positions:
            if p.draft_token < 0 or not p.evaluated or p.position >= n_tokens:
                continue
            ap = p.accept_prob
            accept[p.position] = ap if not math.isnan(ap) else float(p.accepted)
            if p.top_q_probs:
                top[p.position] = p.top_q_probs[0]
    drafted = sum(s.drafted for s in trace.steps)
    rate = sum(s.accepted for s in trace.steps) / drafted if drafted else 0.0
    fill = rate if fill is None else fill
    return TokenRecord(tuple(fill if a is None else a for a in accept), tuple(top), source="trace")


@torch.inference_mode()
def record_teacher_forced(
    draft_model: Any, prompt: Sequence[int] | torch.Tensor, new_tokens: Sequence[int]
) -> TokenRecord:
    """Exact greedy record: one forward pass of the draft model over prompt + generated text;
    position t is accepted iff the draft's argmax after the first t tokens equals token t."""
    from .lm import as_runner

    prompt_t = torch.as_tensor(list(prompt) if not torch.is_tensor(prompt) else prompt.tolist())
    new = torch.as_tensor(list(new_tokens), dtype=torch.long)
    if new.numel() == 0:
        return TokenRecord((), (), source="teacher-forced")
    runner = as_runner(draft_model)
    full = torch.cat([prompt_t.long(), new])
    logits = runner.extend(full[:-1], new.numel())  # [n, V]: row t predicts new[t]
    probs = torch.softmax(logits.float(), dim=-1)
    top_v, top_i = probs.max(dim=-1)
    match = (top_i.cpu() == new).float()
    return TokenRecord(tuple(match.tolist()), tuple(top_v.cpu().tolist()), source="teacher-forced")


@dataclass(frozen=True)
class ReplayCost:
    """Seconds per draft token, and a verify call as a function of tokens fed."""

    draft_step: float
    verify: VerifyCost | None = None  # None: every verify costs ``target_step``
    target_step: float = 1.0

    def verify_time(self, n_tokens: int) -> float:
        if self.verify is None:
            return self.target_step
        return self.verify.time(n_tokens)


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    tokens: int
    target_calls: int
    drafted: int
    accepted: int
    time: float  # modelled seconds
    plain_time: float  # the same tokens decoded plainly under the same cost model
    gammas: tuple[int, ...]  # drafts per call, as the policy chose
    accepted_per_call: tuple[int, ...] = ()

    @property
    def tokens_per_call(self) -> float:
        return self.tokens / self.target_calls if self.target_calls else math.nan

    @property
    def speedup(self) -> float:
        return self.plain_time / self.time if self.time > 0 else math.nan


def replay(
    policy: GammaPolicy | int,
    record: TokenRecord,
    cost: ReplayCost,
    *,
    seed: int = 0,
) -> ReplayResult:
    """Run ``policy`` against a recorded text: no model is called.

    At each step the policy picks gamma; the drafts at positions t..t+gamma-1 are accepted
    while their recorded acceptance says so (probabilities in (0, 1) are drawn with one
    seeded Generator, one uniform per position, shared by every policy so that they face the
    same luck); the step emits the accepted drafts plus one target token.
    """
    pol = as_policy(policy)
    if hasattr(pol, "start"):
        pol.start()
    n = len(record.accept)
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g).tolist()  # one uniform per position, drawn once
    ok = [u[i] < record.accept[i] for i in range(n)]
    t = 0
    calls = drafted = accepted = 0
    total = 0.0
    gammas, acc = [], []
    while t < n:
        want = _count("next_gamma()", int(pol.next_gamma()), 0)
        k = min(want, n - t - 1)
        if hasattr(pol, "draft_length") and k > 0:
            k = pol.draft_length(k, record.top_prob[t : t + k])
        m = 0
        while m < k and ok[t + m]:
            m += 1
        d_time = k * cost.draft_step
        v_time = cost.verify_time(k + 1)
        total += d_time + v_time
        pol.update(k, m, d_time, v_time)
        calls += 1
        drafted += k
        accepted += m
        gammas.append(k)
        acc.append(m)
        t += m + 1
    return ReplayResult(
        policy=getattr(pol, "name", repr(pol)),
        tokens=n,
        target_calls=calls,
        drafted=drafted,
        accepted=accepted,
        time=total,
        plain_time=n * cost.verify_time(1),
        gammas=tuple(gammas),
        accepted_per_call=tuple(acc),
    )


def compare_policies(
    policies: Sequence[GammaPolicy | int],
    records: Sequence[TokenRecord],
    cost: ReplayCost,
    *,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Replay every policy on every record; one row per policy (totals over records)."""
    rows = []
    for pol in policies:
        res = [replay(pol, r, cost, seed=seed + i) for i, r in enumerate(records)]
        tokens = sum(r.tokens for r in res)
        calls = sum(r.target_calls for r in res)
        time_ = sum(r.time for r in res)
        plain = sum(r.plain_time for r in res)
        rows.append(
            {
                "policy": res[0].policy if res else str(pol),
                "tokens": tokens,
                "target_calls": calls,
                "tokens_per_call": tokens / calls if calls else math.nan,
                "drafted": sum(r.drafted for r in res),
                "accepted": sum(r.accepted for r in res),
                "time": time_,
                "speedup": plain / time_ if time_ > 0 else math.nan,
                "mean_gamma": sum(sum(r.gammas) for r in res) / calls if calls else math.nan,
            }
        )
    return rows


def run_live(
    target: Any,
    draft: Any,
    prompts: Sequence[Sequence[int]],
    policies: Sequence[GammaPolicy | int],
    *,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> list[dict[str, Any]]:
    """Greedy runs of every policy on every prompt next to plain decoding, interleaved per
    prompt (so machine drift hits all alike). One row per policy: tokens, seconds, target
    calls, drafted, accepted, speedup over plain, and whether every text equals plain
    decoding's (it must: policies never touch verification)."""
    from .engine import autoregressive_generate, speculative_generate

    pols = [as_policy(p) for p in policies]
    plain_s, plain_tok = 0.0, 0
    acc: dict[str, dict[str, Any]] = {
        p.name: dict(
            policy=p.name, tokens=0, seconds=0.0, calls=0, drafted=0, accepted=0, identical=True
        )
        for p in pols
    }
    for ids in prompts:
        plain = autoregressive_generate(
            target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
        )
        plain_s += plain.total_time
        plain_tok += len(plain.new_tokens)
        for p in pols:
            r = speculative_generate(
                target,
                draft,
                ids,
                gamma=p,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos_token_id,
            )
            row = acc[p.name]
            row["tokens"] += len(r.new_tokens)
            row["seconds"] += r.total_time
            row["calls"] += r.target_calls
            row["drafted"] += sum(r.drafted_counts)
            row["accepted"] += sum(r.accepted_counts)
            row["identical"] &= r.new_tokens == plain.new_tokens
    plain_tps = plain_tok / plain_s if plain_s > 0 else math.nan
    rows = []
    for row in acc.values():
        tps = row["tokens"] / row["seconds"] if row["seconds"] > 0 else math.nan
        row.update(
            tokens_per_call=row["tokens"] / row["calls"] if row["calls"] else math.nan,
            tokens_per_s=tps,
            plain_tokens_per_s=plain_tps,
            speedup=tps / plain_tps,
        )
        rows.append(row)
    return rows
