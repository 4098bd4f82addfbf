"""The policy lab: record a run, replay any gamma policy against a cost model offline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..drafting.policies import GammaPolicy, _count, as_policy
from ..perf.theory import VerifyCost

__all__ = [
    "TokenRecord",
    "record_from_trace",
    "record_teacher_forced",
    "ReplayCost",
    "ReplayResult",
    "replay",
    "compare_policies",
    "run_live",
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

    At each step the policy picks gamma; the drafts at positions t..t+gamma-1 are accepted
    while their recorded acceptance says so (probabilities in (0, 1) are drawn with one
    seeded Generator, one uniform per position, shared by every policy so that they face the
    same luck); the step emits the accepted drafts plus one target token.
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
        if k > 0:
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
    from ..decoding.serial import autoregressive_generate, speculative_generate

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
