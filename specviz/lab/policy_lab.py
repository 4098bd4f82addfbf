"""The policy lab: record a run, replay any gamma policy against a cost model offline."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ..drafting.policies import GammaPolicy, _count, as_policy
from ..perf.theory import VerifyCost, above_call_bound

__all__ = [
    "TokenRecord",
    "record_from_trace",
    "record_from_drafter",
    "record_teacher_forced",
    "ReplayCost",
    "ReplayResult",
    "replay",
    "compare_policies",
    "run_live",
    "PLAIN_GAMMA",
    "gamma_label",
    "best_gamma",
    "gamma_sweep",
    "prompt_gamma_table",
    "BestGamma",
    "best_gammas",
    "GammaClaim",
    "best_gamma_claim",
    "modelled_gamma_table",
]


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

    A drafter that may propose fewer tokens than gamma asks (prompt lookup proposes nothing
    where the text has no earlier match) also records, per position t, ``proposal[t]``: the
    most tokens it proposes for a step starting at t (0: none, the step is a plain decode
    step; -1: no limit known). ``matched[t]``, where given, is how many leading tokens of that
    proposal equal the text (exact for a drafter that reads only the context), and replaces
    ``accept`` position by position. ``max_draft``: the longest draft the record knows about
    (``None``: any).
    """

    accept: tuple[float, ...]
    top_prob: tuple[float, ...]  # NaN where unknown
    source: str = ""
    proposal: tuple[int, ...] = ()  # empty: the drafter proposes whatever gamma asks
    matched: tuple[int, ...] = ()  # empty: draw the acceptances from ``accept``
    max_draft: int | None = None


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
    return TokenRecord(
        tuple(fill if a is None else a for a in accept),
        tuple(top),
        source="trace",
        proposal=_trace_proposals(trace, n_tokens),
    )


def _trace_proposals(trace: Any, n_tokens: int) -> tuple[int, ...]:
    """Per position, the most tokens the traced drafter proposed for a step starting there
    (-1: no limit known), from a run at one constant gamma G: a step that drafted ``d < G``
    tokens ran out of proposal (prompt lookup: ``d = 0`` where it found no match), so a step
    starting there drafts at most ``d``, and one starting ``j`` tokens later inside it at
    most ``d - j`` (the rest of the same match, while the text kept it); a step that drafted
    G says nothing. Under a gamma policy (the gamma asked varies) nothing is known: empty."""
    meta = getattr(trace, "meta", None) or {}
    G = meta.get("gamma")
    if meta.get("gamma_policy") is not None or not isinstance(G, int) or isinstance(G, bool):
        return ()
    out = [-1] * n_tokens
    for s in trace.steps:
        if s.drafted >= G or not 0 <= s.position < n_tokens:
            continue
        out[s.position] = s.drafted
        # inside the step, up to its last kept draft (the text matched the proposal so far)
        for j in range(1, min(s.accepted + 1, s.drafted, n_tokens - s.position)):
            out[s.position + j] = s.drafted - j
    return tuple(out)


def record_from_drafter(
    drafter: Any,
    prompt: Sequence[int] | torch.Tensor,
    new_tokens: Sequence[int],
    *,
    max_gamma: int,
) -> TokenRecord:
    """Exact record of a drafter whose proposal depends only on the context (prompt lookup):
    at every position t it proposes (up to ``max_gamma`` tokens) after prompt + the first t
    generated tokens, as it would in a live step starting there; ``proposal[t]`` is how many
    it proposed (0: no match, the step is a plain decode step) and ``matched[t]`` how many of
    them equal the text (greedy verification keeps exactly those). A replay of
    ``ConstantGamma(g)`` (``g <= max_gamma``) then takes the live run's steps.
    ``accept[t]``: whether the first token proposed at t is right (NaN where none is)."""
    from ..drafting.base import Draft

    if not getattr(drafter, "deterministic", False):
        raise ValueError(f"{getattr(drafter, 'name', drafter)!r} draws: no exact record")
    max_gamma = _count("max_gamma", max_gamma, 1)
    prompt_t = torch.as_tensor(list(prompt) if not torch.is_tensor(prompt) else prompt.tolist())
    new = [int(x) for x in new_tokens]
    full = torch.cat([prompt_t.long(), torch.tensor(new, dtype=torch.long)])
    gen = torch.Generator().manual_seed(0)
    proposal, matched, accept = [], [], []
    for t in range(len(new)):
        prop = drafter.propose(full[: prompt_t.numel() + t], max_gamma, gen)
        if not isinstance(prop, Draft):
            raise TypeError(f"{drafter.name!r} proposed a {type(prop).__name__}, not a chain")
        toks = prop.tokens.tolist()
        m = 0
        while m < len(toks) and t + m < len(new) and toks[m] == new[t + m]:
            m += 1
        proposal.append(len(toks))
        matched.append(m)
        accept.append(float(m > 0) if toks else math.nan)
    return TokenRecord(
        tuple(accept),
        (math.nan,) * len(new),
        source="drafter",
        proposal=tuple(proposal),
        matched=tuple(matched),
        max_draft=max_gamma,
    )


@torch.inference_mode()
def record_teacher_forced(
    draft_model: Any, prompt: Sequence[int] | torch.Tensor, new_tokens: Sequence[int]
) -> TokenRecord:
    """Exact greedy record: one forward pass of the draft model over prompt + generated text;
    position t is accepted iff the draft's argmax after the first t tokens equals token t."""
    from ..core.runners import as_runner

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

    At each step the policy picks gamma, capped by what the drafter proposes there
    (``record.proposal``: where it proposes nothing, the step drafts nothing and costs one
    plain decode step, ``v(1)``, as it did live); the drafts at positions t..t+gamma-1 are
    accepted while their recorded acceptance says so (``record.matched`` where recorded;
    else probabilities in (0, 1) are drawn with one seeded Generator, one uniform per
    position, shared by every policy so that they face the same luck); the step emits the
    accepted drafts plus one target token.
    """
    pol = as_policy(policy)
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
        if record.max_draft is not None and k > record.max_draft:
            raise ValueError(
                f"{pol!r} drafts {k} tokens; the record knows proposals of at most "
                f"{record.max_draft}"
            )
        if record.proposal and record.proposal[t] >= 0:
            k = min(k, record.proposal[t])  # the drafter proposes no more here
        if k > 0:
            k = pol.draft_length(k, record.top_prob[t : t + k])
        if record.matched:
            m = min(k, record.matched[t])
        else:
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
    decoding's (it must: policies never touch verification). ``speedup_ci_low`` /
    ``speedup_ci_high``: a 95% bootstrap interval of the speedup over the prompts (NaN with
    one prompt), so a live speedup comes with the spread a single timed run hides."""
    from ..decoding.serial import autoregressive_generate, speculative_generate
    from .verdicts import speedup_verdict

    pols = [as_policy(p) for p in policies]
    plain_s, plain_tok = 0.0, 0
    per_prompt: dict[str, dict[str, list[float]]] = {
        k: {"tokens": [], "seconds": []} for k in ["plain", *(p.name for p in pols)]
    }
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
        per_prompt["plain"]["tokens"].append(len(plain.new_tokens))
        per_prompt["plain"]["seconds"].append(plain.total_time)
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
            per_prompt[p.name]["tokens"].append(len(r.new_tokens))
            per_prompt[p.name]["seconds"].append(r.total_time)
    plain_tps = plain_tok / plain_s if plain_s > 0 else math.nan
    rows = []
    for row in acc.values():
        tps = row["tokens"] / row["seconds"] if row["seconds"] > 0 else math.nan
        ci = speedup_verdict(per_prompt["plain"], per_prompt[row["policy"]], claim="",
                             label=row["policy"]).ci  # fmt: skip
        row.update(
            tokens_per_call=row["tokens"] / row["calls"] if row["calls"] else math.nan,
            tokens_per_s=tps,
            plain_tokens_per_s=plain_tps,
            speedup=tps / plain_tps,
            speedup_ci_low=ci[0],
            speedup_ci_high=ci[1],
        )
        rows.append(row)
    return rows


# -- the best gamma, per category (claim 3) ---------------------------------------------------

#: Gamma 0 is plain decoding: a candidate of every "best gamma", at speedup 1 by definition.
PLAIN_GAMMA = 0


def gamma_label(gamma: int) -> str:
    """``"gamma 0 (plain)"`` for plain decoding, ``"gamma g"`` otherwise."""
    return "gamma 0 (plain)" if int(gamma) == PLAIN_GAMMA else f"gamma {int(gamma)}"


def best_gamma(speedups: Mapping[int, float]) -> tuple[int, float]:
    """The best ``(gamma, speedup)`` among the measured gammas *and* plain decoding (gamma 0,
    speedup 1 unless given): when plain decoding beats every gamma, the best is gamma 0. NaN
    speedups are no candidates; ties go to the shorter draft.

    >>> best_gamma({1: 0.8, 3: 0.83})
    (0, 1.0)
    >>> best_gamma({1: 1.2, 3: 1.5})
    (3, 1.5)
    """
    cands = {PLAIN_GAMMA: 1.0} | {int(g): float(v) for g, v in speedups.items()}
    best, best_s = PLAIN_GAMMA, cands[PLAIN_GAMMA]
    for g in sorted(cands):
        v = cands[g]
        if math.isfinite(v) and (v > best_s + 1e-12 or not math.isfinite(best_s)):
            best, best_s = g, v
    return best, best_s


def gamma_sweep(
    target: Any,
    draft: Any,
    prompts: Mapping[str, Sequence[int]],
    gammas: Sequence[int],
    *,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> tuple[dict[tuple[str, int], Any], dict[str, Any]]:
    """Greedy runs of every prompt at every gamma, each prompt's plain run right before its
    speculative ones (machine drift hits both alike; one untimed warm-up first). Returns
    ``(runs, plain)``: (prompt id, gamma) -> traced result, prompt id -> plain result. Raises
    if a text differs from plain decoding's (greedy speculative decoding must not change it)."""
    from ..decoding.serial import autoregressive_generate, speculative_generate

    items = list(prompts.items())
    if items:
        autoregressive_generate(target, items[0][1], max_new_tokens=2, eos_token_id=eos_token_id)
    runs: dict[tuple[str, int], Any] = {}
    plain: dict[str, Any] = {}
    for pid, ids in items:
        plain[pid] = autoregressive_generate(
            target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
        )
        for g in gammas:
            r = speculative_generate(
                target,
                draft,
                ids,
                gamma=int(g),
                max_new_tokens=max_new_tokens,
                eos_token_id=eos_token_id,
            )
            if r.new_tokens != plain[pid].new_tokens:
                raise AssertionError(f"{pid} gamma={g}: greedy text differs from plain decoding")
            runs[(pid, int(g))] = r
    return runs, plain


def prompt_gamma_table(
    runs: Mapping[tuple[str, int], Any], plain: Mapping[str, Any], categories: Mapping[str, str]
) -> Any:
    """One row per (prompt, gamma) of ``runs`` ((prompt id, gamma) -> GenerationResult) with its
    category, tokens, target calls and seconds next to the prompt's plain run -- the input of
    :func:`best_gammas`."""
    import pandas as pd

    rows = [
        dict(
            category=categories[pid],
            prompt=pid,
            gamma=int(g),
            tokens=len(r.new_tokens),
            target_calls=int(r.target_calls),
            seconds=float(r.total_time),
            plain_tokens=len(plain[pid].new_tokens),
            plain_seconds=float(plain[pid].total_time),
        )
        for (pid, g), r in runs.items()
    ]
    return pd.DataFrame(rows)


def modelled_gamma_table(
    runs: Mapping[tuple[str, int], Any],
    plain: Mapping[str, Any],
    categories: Mapping[str, str],
    *,
    c: float,
    verify_cost: Any,
) -> Any:
    """:func:`prompt_gamma_table` with the clock replaced by the cost model, in units of one
    target decode step: a recorded step that drafted ``d`` tokens costs ``d * c + v(d + 1)``
    (``verify_cost.ratio``), a plain token costs 1. The steps (how many were drafted and
    accepted, prompt by prompt) are the measured ones, and so are ``c`` and ``v(n)``; only the
    machine's moment-to-moment timing noise is left out -- so the best gamma per category, and
    the claim-3 verdict on it, vary only with the prompts.

    >>> from types import SimpleNamespace as NS
    >>> step = lambda d: NS(drafted=d, accepted=d)
    >>> run = NS(new_tokens=[0] * 8, trace=NS(steps=[step(3), step(3)]))
    >>> v = NS(ratio=lambda n: 1.0 + 0.1 * (n - 1))
    >>> t = modelled_gamma_table({("p", 3): run}, {"p": NS(new_tokens=[0] * 8)}, {"p": "x"},
    ...                          c=0.1, verify_cost=v)
    >>> round(float(t.seconds[0]), 2), float(t.plain_seconds[0])
    (3.2, 8.0)
    """
    import pandas as pd

    if not (math.isfinite(float(c)) and c >= 0):
        raise ValueError(f"the draft cost ratio c must be a measured number >= 0, got {c!r}")
    rows = []
    for (pid, g), r in runs.items():
        if r.trace is None:
            raise ValueError(f"{pid} gamma={g}: the cost model needs a traced run")
        cost = sum(s.drafted * c + verify_cost.ratio(s.drafted + 1) for s in r.trace.steps)
        rows.append(
            dict(
                category=categories[pid],
                prompt=pid,
                gamma=int(g),
                tokens=len(r.new_tokens),
                target_calls=len(r.trace.steps),
                seconds=float(cost),
                plain_tokens=len(plain[pid].new_tokens),
                plain_seconds=float(len(plain[pid].new_tokens)),
            )
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class BestGamma:
    """The best measured gamma of one category (0 = plain decoding), its speedup, every
    candidate's speedup, and -- with at least 2 prompts -- the gammas that were best in a
    bootstrap over the prompts, smallest set holding ``level`` of the resamples (``likely``;
    ``None`` with fewer prompts).

    ``above_bound`` maps each gamma whose pooled speed-up exceeds its pooled tokens per target
    call to those tokens per call: impossible for a real speed-up (a speculative call costs
    at least one plain decode step, :func:`specviz.perf.theory.above_call_bound`), so timing
    noise -- :meth:`describe` says so and :func:`best_gamma_claim` leaves the category out."""

    category: str
    gamma: int
    speedup: float
    speedups: dict[int, float]
    prompts: int
    likely: tuple[int, ...] | None
    level: float = 0.95
    above_bound: dict[int, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return gamma_label(self.gamma)

    def describe(self) -> str:
        s = f"best {self.label} ({self.speedup:.2f}x)"
        if self.likely is not None:
            s += f", {self.level:.0%} bootstrap set {{{', '.join(map(str, self.likely))}}}"
        for g, tpc in sorted(self.above_bound.items()):
            s += (
                f"; timing noise: gamma {g}'s {self.speedups[g]:.2f}x is above its {tpc:.2f} "
                "tokens per target call, which no real speed-up exceeds"
            )
        return s


def _speedups(t: Any) -> dict[int, float]:
    g = t.groupby("gamma")[["tokens", "seconds", "plain_tokens", "plain_seconds"]].sum()
    plain_tps = g["plain_tokens"] / g["plain_seconds"]
    tps = g["tokens"] / g["seconds"]
    return {int(k): float(v) for k, v in (tps / plain_tps).items()}


def best_gammas(
    table: Any, *, level: float = 0.95, n_boot: int = 1000, seed: int = 0
) -> dict[str, BestGamma]:
    """Per category of a :func:`prompt_gamma_table`: the best measured gamma, plain decoding
    included (:func:`best_gamma`; pooled speedup = tokens/s over plain's tokens/s on the same
    prompts), and a seeded bootstrap over prompts of which gamma is best."""
    rng = np.random.default_rng(seed)
    out = {}
    for cat, t in table.groupby("category", sort=False):
        sp = _speedups(t)
        g, v = best_gamma(sp)
        pids = list(dict.fromkeys(t["prompt"]))
        likely = None
        if len(pids) >= 2:
            wins = _bootstrap_best(t, pids, rng, n_boot)
            held, chosen = 0, []
            for b, n in sorted(wins.items(), key=lambda kv: (-kv[1], kv[0])):
                chosen.append(b)
                held += n
                if held >= level * n_boot:
                    break
            likely = tuple(sorted(chosen))
        above = {}
        if "target_calls" in t:
            calls = t.groupby("gamma")[["tokens", "target_calls"]].sum()
            above = {
                int(k): float(r.tokens / r.target_calls)
                for k, r in calls.iterrows()
                if r.target_calls and above_call_bound(sp[int(k)], r.tokens / r.target_calls)
            }
        out[str(cat)] = BestGamma(
            str(cat), g, v, {0: 1.0} | sp, len(pids), likely, level, above_bound=above
        )
    return out


def _bootstrap_best(t: Any, pids: list[str], rng: Any, n_boot: int) -> dict[int, int]:
    """How often each gamma (0 = plain) is best when the prompts are resampled."""
    gammas = sorted(int(g) for g in set(t["gamma"]))
    piv = {
        col: t.pivot_table(index="prompt", columns="gamma", values=col, aggfunc="sum")
        .reindex(index=pids, columns=gammas)
        .to_numpy(dtype=float)
        for col in ("tokens", "seconds", "plain_tokens", "plain_seconds")
    }
    idx = rng.integers(0, len(pids), size=(n_boot, len(pids)))
    tot = {k: v[idx].sum(axis=1) for k, v in piv.items()}  # (n_boot, n_gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        sp = (tot["tokens"] / tot["seconds"]) / (tot["plain_tokens"] / tot["plain_seconds"])
    sp = np.where(np.isfinite(sp), sp, -np.inf)
    cand = np.concatenate([np.ones((n_boot, 1)), sp], axis=1)  # gamma 0 (plain) first
    labels = [PLAIN_GAMMA, *gammas]
    best = np.argmax(cand > cand.max(axis=1, keepdims=True) - 1e-12, axis=1)
    wins: dict[int, int] = {}
    for b in best:
        wins[labels[b]] = wins.get(labels[b], 0) + 1
    return wins


@dataclass(frozen=True)
class GammaClaim:
    """Claim 3 (the best gamma is not one constant: it depends on the task) at this size:

    * ``supports``: two categories whose bootstrap sets of best gamma do not overlap;
    * ``not supported``: every category's set is the same single gamma;
    * ``cannot tell``: the sets overlap, fewer than 2 prompts in a category (no interval), or
      fewer than 2 categories.

    A category with a speed-up above its tokens per call (``BestGamma.above_bound``: timing
    noise, no real speed-up) is left out of the comparison; the reason names it.
    """

    verdict: str
    reason: str
    bests: dict[str, BestGamma]
    claim: ClassVar[int] = 3  # for specviz.lab.verdicts.verdict_summary

    def sentence(self) -> str:
        per = "; ".join(f"{c}: {b.describe()}" for c, b in self.bests.items())
        tail = {
            "supports": "supports claim 3 at this size",
            "not supported": "claim 3 not supported at this size",
        }.get(self.verdict, "cannot tell at this size")
        return f"Claim 3, best gamma per category ({per}): {tail} ({self.reason})."


def best_gamma_claim(bests: Mapping[str, BestGamma]) -> GammaClaim:
    """The verdict of claim 3 from :func:`best_gammas` (see :class:`GammaClaim`)."""
    shown = dict(bests)
    noisy = [c for c, b in shown.items() if b.above_bound]
    claim = _gamma_claim({c: b for c, b in shown.items() if c not in noisy})
    if not noisy:
        return claim
    why = f"{', '.join(noisy)} left out: a speed-up above its tokens per target call, timing noise"
    return GammaClaim(claim.verdict, f"{claim.reason}; {why}", shown)


def _gamma_claim(bests: Mapping[str, BestGamma]) -> GammaClaim:
    bests = dict(bests)
    if len(bests) < 2:
        why = "one category: nothing to compare" if bests else "no category to compare"
        return GammaClaim("cannot tell", why, bests)
    few = [c for c, b in bests.items() if b.likely is None]
    if few:
        n = min(b.prompts for b in bests.values())
        return GammaClaim(
            "cannot tell",
            f"{n} prompt(s) in a category: an interval over prompts needs at least 2 each",
            bests,
        )
    cats = list(bests)
    for i, a in enumerate(cats):
        for b in cats[i + 1 :]:
            if not set(bests[a].likely) & set(bests[b].likely):
                return GammaClaim(
                    "supports",
                    f"{a} and {b}: their sets of best gamma do not overlap",
                    bests,
                )
    sets = {bests[c].likely for c in cats}
    if len(sets) == 1 and len(next(iter(sets))) == 1:
        g = next(iter(sets))[0]
        return GammaClaim("not supported", f"{gamma_label(g)} is best in every category", bests)
    return GammaClaim("cannot tell", "the sets of best gamma overlap", bests)
