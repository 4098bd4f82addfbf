"""Will speculation pay on this host? Measured costs, the theory, and the gamma it picks.

Speculative decoding trades target calls for draft work and wider verify passes. Whether
that trade pays is a property of the host as much as of the pair: with the Qwen2.5-Coder
1.5B/0.5B pair on a busy 2-core CPU a run accepted 78.7% of drafts, committed 4.00 tokens per
target call -- and was 0.40x as fast as plain decoding. The two costs that decide it are
measured here before anything is promised:

* ``c``    -- one drafted token's cost in target decode steps (a draft model's decode step
  over the target's; for other drafters, measured inside a short traced pilot run);
* ``v(n)`` -- a target call on ``n`` tokens over one decode step
  (:func:`specviz.perf.theory.measure_verify_cost`).

With them, Leviathan et al.'s speedup E(a, g) / (g c + v(g + 1)) says for which acceptance a
speculation can pay at all (:meth:`Calibration.explain`), and a replay of a prompt's exact
acceptance record (:func:`specviz.lab.policy_lab.replay`) picks the gamma -- 0 meaning "decode
plainly, speculation would lose" -- and predicts the speedup the clock should show.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..perf import theory
from ..perf.theory import VerifyCost
from .policy_lab import ReplayCost, TokenRecord, record_teacher_forced, replay

__all__ = ["Calibration", "GammaChoice", "calibrate", "choose_gamma", "acceptance_record"]

#: The acceptance a drafter would need to be excellent at: if speculation cannot pay even at
#: this rate, it cannot pay on this host for this pair.
HIGH_ACCEPTANCE = 0.9


@dataclass(frozen=True)
class Calibration:
    """The measured costs of one (target, drafter) pair on this host."""

    target_step: float  # seconds of one target decode step
    draft_step: float  # seconds per drafted token
    verify: VerifyCost  # target call time by tokens fed
    source: str  # how draft_step was measured
    seconds: float  # how long calibrating took

    @property
    def c(self) -> float:
        return self.draft_step / self.target_step

    def v(self, n: int) -> float:
        """A target call on ``n`` tokens, in decode steps."""
        return self.verify.ratio(n)

    def best(self, acceptance: float, max_gamma: int = 8) -> tuple[int, float]:
        """(gamma, predicted speedup) at i.i.d. ``acceptance`` by the theory with the measured
        c and v (gamma 0: plain decoding, speedup 1)."""
        g = theory.optimal_gamma(acceptance, self.c, max_gamma=max_gamma, verify_cost=self.verify)
        return g, (theory.speedup(acceptance, g, self.c, self.v(g + 1)) if g else 1.0)

    def break_even(self, max_gamma: int = 8) -> float:
        """The lowest acceptance at which some gamma beats plain decoding (NaN: none up to
        ``HIGH_ACCEPTANCE`` does)."""
        lo, hi = 0.0, HIGH_ACCEPTANCE
        if self.best(hi, max_gamma)[0] == 0:
            return math.nan
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.best(mid, max_gamma)[0] else (mid, hi)
        return hi

    def can_pay(self, max_gamma: int = 8) -> bool:
        return self.best(HIGH_ACCEPTANCE, max_gamma)[0] > 0

    def explain(self, gamma: int = 4, max_gamma: int = 8) -> str:
        """Why speculation can or cannot pay here, in numbers."""
        a = HIGH_ACCEPTANCE
        e = theory.expected_tokens_per_call(a, gamma)
        cost = gamma * self.c + self.v(gamma + 1)
        head = (
            f"measured on this host: a drafted token costs c = {self.c:.2f} target steps "
            f"({self.source}), a verify pass on {gamma + 1} tokens v({gamma + 1}) = "
            f"{self.v(gamma + 1):.2f} steps"
        )
        arith = (
            f"at {a:.0%} acceptance gamma {gamma} commits E = {e:.2f} tokens per target call "
            f"for {gamma} x {self.c:.2f} + {self.v(gamma + 1):.2f} = {cost:.2f} steps: "
            f"{e / cost:.2f}x"
        )
        if not self.can_pay(max_gamma):
            return (
                f"on this host speculation cannot pay for this pair: {head}; even {arith}, and "
                f"no gamma up to {max_gamma} does better than plain decoding"
            )
        g, s = self.best(a, max_gamma)
        return (
            f"{head}; {arith} (best gamma {g}: {s:.2f}x); speculation pays here once "
            f"acceptance exceeds {self.break_even(max_gamma):.0%}"
        )


@dataclass(frozen=True)
class GammaChoice:
    """The gamma picked for one prompt and what it predicts."""

    gamma: int  # 0: plain decoding
    speedup: float  # predicted wall-clock speedup over plain decoding
    tokens_per_call: float  # predicted tokens per target call
    by_gamma: dict[int, float]  # predicted speedup of every gamma tried
    acceptance: float  # the record's mean acceptance

    def describe(self) -> str:
        if self.gamma == 0:
            g, s = max(self.by_gamma.items(), key=lambda kv: kv[1])
            return (
                f"gamma 0 (plain): at acceptance {self.acceptance:.0%} every gamma is predicted "
                f"to lose (best gamma {g}: {s:.2f}x)"
            )
        return (
            f"gamma {self.gamma}: predicted {self.speedup:.2f}x, "
            f"{self.tokens_per_call:.2f} tokens per call"
        )


@torch.inference_mode()
def calibrate(
    target: Any,
    drafter: Any,
    *,
    max_gamma: int = 8,
    context: int = 128,
    repeats: int = 3,
    pilot: Sequence[int] | None = None,
    eos_token_id: int | None = None,
) -> Calibration:
    """Measure c and v(1..max_gamma+1) on this host. A draft *model* is timed on decode steps
    at ``context`` tokens (as the target); any other drafter inside a traced pilot run on
    ``pilot`` (token ids; required then), whose draft seconds per drafted token over the
    plain seconds per token is c (:func:`~specviz.perf.theory.measured_draft_cost`)."""
    from ..decoding.serial import autoregressive_generate, speculative_generate

    t0 = time.perf_counter()
    sizes = sorted({n for n in (2, 3, 5, 7, 9, 13, 17) if n <= max_gamma} | {max_gamma + 1})
    verify = theory.measure_verify_cost(
        target, max_tokens=max_gamma + 1, context=context, repeats=repeats, sizes=sizes
    )
    model = _draft_model(drafter)
    if model is not None:
        d = theory.measure_verify_cost(model, max_tokens=1, context=context, repeats=repeats)
        return Calibration(verify.seconds[0], d.seconds[0], verify, "draft decode steps",
                           time.perf_counter() - t0)  # fmt: skip
    if pilot is None:
        raise ValueError("a drafter without a draft model needs a pilot prompt to measure c")
    kw = dict(max_new_tokens=24, eos_token_id=eos_token_id)
    plain = autoregressive_generate(target, pilot, **kw)
    spec = speculative_generate(target, drafter, pilot, gamma=4, **kw)
    c = theory.measured_draft_cost([spec], [plain])
    return Calibration(verify.seconds[0], c * verify.seconds[0], verify, "a traced pilot run",
                       time.perf_counter() - t0)  # fmt: skip


def _draft_model(drafter: Any) -> Any:
    """The draft model behind ``drafter`` (a model, or a model drafter), else None."""
    if isinstance(drafter, torch.nn.Module):
        return drafter
    model = getattr(drafter, "model", None)
    return model if isinstance(model, torch.nn.Module) and not drafter.wants_target_hidden else None


def acceptance_record(
    drafter: Any, prompt: Sequence[int], plain_tokens: Sequence[int]
) -> TokenRecord | None:
    """The exact greedy acceptance of every position of a plain run (one forward pass of the
    draft model), or None for drafters without a draft model of their own."""
    model = _draft_model(drafter)
    if model is None:
        return None
    return record_teacher_forced(model, prompt, plain_tokens)


def choose_gamma(record: TokenRecord, cal: Calibration, *, max_gamma: int = 8) -> GammaChoice:
    """Replay ``record`` at every gamma in 0..max_gamma with the measured costs and keep the
    fastest (gamma 0, plain decoding, unless a gamma is predicted faster)."""
    cost = ReplayCost(cal.draft_step, cal.verify, cal.target_step)
    # gamma 0 is plain decoding: speedup 1 by definition
    runs = {g: replay(g, record, cost) for g in range(1, max_gamma + 1)}
    by_gamma = {g: r.speedup for g, r in runs.items()}
    best = max(by_gamma, key=lambda g: by_gamma[g], default=0)
    gamma = best if by_gamma.get(best, 0.0) > 1.0 else 0
    acc = sum(record.accept) / len(record.accept) if record.accept else math.nan
    if gamma == 0:
        return GammaChoice(0, 1.0, 1.0, by_gamma, acc)
    return GammaChoice(gamma, runs[gamma].speedup, runs[gamma].tokens_per_call, by_gamma, acc)
