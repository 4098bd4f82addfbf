"""The claim verdicts of the single-run lessons (notebooks 00-05), computed here so that a
notebook's "What we saw" cell is a few calls and every rule is stated once, with a test (the
verdicts on the law, notebooks 04-05: :mod:`._single_run_laws`).

Each function returns a :class:`ClaimLine`: the claim's number (the article's, as in
``docs/notebooks.md``), the verdict its numbers allow at this size -- ``supports``,
``cannot tell``, ``contradicts`` or ``not shown`` -- and the sentence the notebook prints
(numbers first, then what they allow). :func:`verdict_summary` folds a notebook's lines into
the one-line table the reports end with; :func:`read_verdict` reads a printed line back (the
demo page compares the demo-size and full-size verdicts with it).

>>> line = greedy_identity([1, 2, 3], [1, 2, 3], what="one prompt")
>>> line.claim, line.verdict
(7, 'supports')
>>> verdict_summary([line, ClaimLine(10, CANNOT_TELL, "...")])
'Verdicts at this size: claim 7 supports; claim 10 cannot tell.'
>>> read_verdict("Claim 3: ... -- cannot tell at this size (the sets overlap)")
'cannot tell'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...load.claims import claim1_verdict
from ...stats import min_detectable_tv
from ...views.trace import acceptance_interval, acceptance_text

__all__ = [
    "p_phrase",
    "pvalues_shown",
    "CANNOT_TELL",
    "CONTRADICTS",
    "NOT_SHOWN",
    "SUPPORTS",
    "ClaimLine",
    "acceptance_by_position",
    "acceptance_vs_probabilities",
    "answer_text",
    "calls_vs_speed",
    "draft_sources",
    "opening_step",
    "exact_law_check",
    "first_rejection",
    "first_token_rejections",
    "from_interval",
    "greedy_identity",
    "read_verdict",
    "steps_to_decide",
    "theory_band_line",
    "toy_call_savings",
    "verdict_summary",
]

SUPPORTS, CANNOT_TELL, CONTRADICTS, NOT_SHOWN = (
    "supports",
    "cannot tell",
    "contradicts",
    "not shown",
)


@dataclass(frozen=True)
class ClaimLine:
    """One printed verdict: the claim, what its numbers allow, and the sentence."""

    claim: int
    verdict: str
    text: str

    def __str__(self) -> str:
        return self.text


def verdict_summary(lines: Iterable[Any]) -> str:
    """``Verdicts at this size: claim 1 supports; claim 7 supports; ...`` -- every claim once,
    in the order first printed; a claim judged several times (one line per setting) lists
    each distinct verdict with its count. Takes :class:`ClaimLine` objects, the load
    sweeps' :class:`specviz.load.ClaimVerdict` (its status read by :func:`read_verdict`:
    "not supported" is a contradiction, "partly supported" cannot tell) and any other object
    with a ``claim`` number and a ``verdict`` word (08's
    :class:`specviz.lab.policy_lab.GammaClaim`); strings are skipped.

    >>> from specviz.load import ClaimVerdict
    >>> verdict_summary([ClaimVerdict(12, "cannot tell", "..."), ClaimVerdict(10, "supported", "")])
    'Verdicts at this size: claim 12 cannot tell; claim 10 supports.'
    """
    seen: dict[int, list[str]] = {}
    for line in lines:
        if isinstance(line, ClaimLine):
            seen.setdefault(line.claim, []).append(line.verdict)
        elif hasattr(line, "claim") and (hasattr(line, "status") or hasattr(line, "verdict")):
            word = line.status if hasattr(line, "status") else line.verdict
            said = read_verdict(str(word)) or CANNOT_TELL
            seen.setdefault(int(line.claim), []).append(said)
    parts = []
    for claim, verdicts in seen.items():
        kinds = list(dict.fromkeys(verdicts))
        if len(kinds) == 1:
            parts.append(f"claim {claim} {kinds[0]}")
        else:
            counts = ", ".join(f"{verdicts.count(k)} {k}" for k in kinds)
            parts.append(f"claim {claim} {counts} (of {len(verdicts)})")
    return "Verdicts at this size: " + "; ".join(parts) + "."


def from_interval(verdict: str, *, below: str = CONTRADICTS) -> str:
    """This module's word for an interval verdict of :mod:`specviz.lab.analysis`
    (``supports`` / ``not supported`` / ``cannot tell``); ``below`` names "not supported"
    where the other side is not a contradiction (claim 10: no cue, so the case is not shown).

    >>> from_interval("not supported", below=NOT_SHOWN), from_interval("cannot tell")
    ('not shown', 'cannot tell')
    """
    return {"supports": SUPPORTS, "not supported": below}.get(verdict, CANNOT_TELL)


# Words a printed verdict uses, most specific first ("not supported" before "supported").
_READ = (
    ("cannot tell", CANNOT_TELL),
    ("inconclusive", CANNOT_TELL),
    ("not shown", NOT_SHOWN),
    ("partly supported", CANNOT_TELL),
    ("not supported", CONTRADICTS),
    ("does not support", CONTRADICTS),
    ("contradicts", CONTRADICTS),
    ("rejects", CONTRADICTS),
    ("supports", SUPPORTS),
    ("supported", SUPPORTS),
)


def read_verdict(text: str) -> str | None:
    """The verdict a printed claim line states (the first verdict word after its numbers),
    or None when it states none. Reads every notebook's lines, this module's and the load
    sweeps' (``supported`` / ``partly supported`` / ``not supported`` / ``not shown``)."""
    low = text.lower()
    hits = [(low.find(w), -len(w), v) for w, v in _READ if w in low]
    return min(hits)[2] if hits else None


# -- 00: one prompt, plain vs speculative ------------------------------------------------------


def _call_split(plain: Any, spec: Any) -> Any:
    """The table :func:`specviz.load.claim1_verdict` reads, from two single runs (the first
    call of each also prefills the prompt)."""
    import pandas as pd

    summary = spec.summary()
    rows = []
    for mode, run, draft_s, verify_s in (
        ("plain", plain, 0.0, plain.total_time),
        ("speculative", spec, summary.draft_time, summary.verify_time),
    ):
        calls, tokens = max(run.target_calls, 1), max(len(run.new_tokens), 1)
        rows.append(
            {
                "mode": mode,
                "target calls per token": calls / tokens,
                "draft ms per call": 1e3 * draft_s / calls,
                "verify ms per call": 1e3 * verify_s / calls,
                "ms per call": 1e3 * run.total_time / calls,
            }
        )
    return pd.DataFrame(rows)


def calls_vs_speed(plain: Any, spec: Any, *, gamma: int) -> list[ClaimLine]:
    """Claim 1 from one plain and one speculative run of the same prompt: the call counts,
    then the exact split ``speedup = (N_plain / N_spec) x (per-call cost ratio)`` and the
    verdict of :func:`specviz.load.claim1_verdict` (fewer calls per token *and* dearer calls:
    supports; fewer but not dearer: cannot tell, timing noise; no fewer: contradicts), with
    whether the pair paid in this run.

    ``plain`` and ``spec`` may also be equal-length sequences of timed repeats of the same
    greedy runs (same tokens, same calls; only the clock differs): one timed run can show
    1.28x where the next shows 0.9x, so the split is printed for the median repeat with the
    range of the speedup and of the per-call cost ratio over all of them, and the verdict
    holds only when every repeat gives it (repeats that disagree: cannot tell)."""
    if isinstance(plain, Sequence) and isinstance(spec, Sequence):
        return _calls_vs_speed_repeats(list(plain), list(spec), gamma=gamma)
    return _calls_vs_speed_one(plain, spec, gamma=gamma)


def _calls_vs_speed_repeats(plains: list[Any], specs: list[Any], *, gamma: int) -> list[ClaimLine]:
    if not plains or len(plains) != len(specs):
        raise ValueError(
            f"calls_vs_speed: give as many plain as speculative repeats (got {len(plains)} and "
            f"{len(specs)}), at least one"
        )
    if len(plains) == 1:
        return _calls_vs_speed_one(plains[0], specs[0], gamma=gamma)
    runs = [_calls_vs_speed_one(p, s, gamma=gamma) for p, s in zip(plains, specs, strict=True)]
    speedups = [p.total_time / s.total_time for p, s in zip(plains, specs, strict=True)]
    costs = [
        (p.total_time / p.target_calls) / (s.total_time / s.target_calls)
        for p, s in zip(plains, specs, strict=True)
    ]
    k = int(np.argsort(speedups)[len(speedups) // 2])  # the median repeat (upper for even)
    seen = {r[1].verdict for r in runs}
    verdict = seen.pop() if len(seen) == 1 else CANNOT_TELL
    head, split = runs[k]
    numbers, why = split.text.split(" -- ", 1)
    if len({r[1].verdict for r in runs}) == 1:
        why = why.replace(" (one timed run on this machine, no interval).", "").replace(
            " in this run", " in every repeat"
        )
        agree = f"all {len(runs)} repeats give this verdict"
    else:
        why = "cannot tell on this machine: the timed repeats disagree on claim 1's verdict"
        agree = ", ".join(sorted({r[1].verdict for r in runs}))
    return [
        ClaimLine(1, verdict, head.text),
        ClaimLine(
            1,
            verdict,
            f"{numbers} -- {why} (the median of {len(runs)} timed repeats: speedup range "
            f"{min(speedups):.2f}-{max(speedups):.2f}x, per-call cost ratio range "
            f"{min(costs):.2f}-{max(costs):.2f}; {agree}).",
        ),
    ]


def _calls_vs_speed_one(plain: Any, spec: Any, *, gamma: int) -> list[ClaimLine]:
    n = len(spec.new_tokens)
    calls = plain.target_calls / spec.target_calls
    per_plain, per_spec = plain.total_time / plain.target_calls, spec.total_time / spec.target_calls
    cost = per_plain / per_spec
    speedup = plain.total_time / spec.total_time
    split = _call_split(plain, spec)
    status = claim1_verdict(split).status
    verdict = {"supported": SUPPORTS, "not supported": CONTRADICTS}.get(status, CANNOT_TELL)
    if verdict == SUPPORTS:
        why = (
            "supports claim 1 in this run: the speed came from fewer serial calls, each dearer"
            if speedup > 1
            else "supports claim 1 (fewer serial calls, each dearer), but no gain: each call "
            "was dearer by more than the calls saved, so this pair is slower here (a better "
            "drafter or a shorter gamma)"
        )
    elif verdict == CANNOT_TELL:
        why = (
            "fewer serial calls, but a speculative call was not dearer than a plain one in this "
            "single timed run (timing noise?): cannot tell the per-call half of claim 1 here"
        )
    else:
        why = "no fewer serial calls: this run contradicts claim 1"
    summary = spec.summary()
    verify_ms, draft_ms = (
        1e3 * t / spec.target_calls for t in (summary.verify_time, summary.draft_time)
    )
    return [
        ClaimLine(
            1,
            verdict,
            f"Claim 1: {n} tokens took {plain.target_calls} serial target calls plain and "
            f"{spec.target_calls} speculative ({calls:.2f}x fewer); each speculative call scored "
            f"up to {gamma + 1} positions at once.",
        ),
        ClaimLine(
            1,
            verdict,
            f"Calls vs speed: a plain call took {1e3 * per_plain:.1f} ms, a speculative call "
            f"{1e3 * per_spec:.1f} ms ({verify_ms:.1f} ms target scoring up to {gamma + 1} "
            f"positions, {draft_ms:.1f} ms drafting, {1e3 * per_spec - verify_ms - draft_ms:.1f} "
            f"ms other; in both runs the first call also prefills the prompt); speedup "
            f"{speedup:.2f}x = {calls:.2f}x fewer calls x {cost:.2f} per-call cost ratio -- {why} "
            "(one timed run on this machine, no interval).",
        ),
    ]


def _tested(trace: Any) -> list[tuple[int, Any]]:
    return [
        (s.step, r) for s in trace.steps for r in s.positions if r.evaluated and r.draft_token >= 0
    ]


def answer_text(
    tokenizer: Any, tokens: Sequence[int], *, max_new_tokens: int, eos_token_id: Any = None
) -> str:
    """The generated answer as a reader should take it: the decoded text, then how it ended --
    at the end-of-sequence token, or cut at ``max_new_tokens`` before the model finished (said
    so, with "[...]", so that a sentence cut by the token budget is not read as the model's
    answer).

    >>> class Tok:
    ...     def decode(self, ids, skip_special_tokens=False):
    ...         return " ".join(str(i) for i in ids if not (skip_special_tokens and i == 0))
    >>> print(answer_text(Tok(), [5, 6, 7], max_new_tokens=3, eos_token_id=0))
    5 6 7 [...]
    (cut at MAX_NEW_TOKENS = 3 new tokens, before the model finished its answer)
    >>> print(answer_text(Tok(), [5, 6, 0], max_new_tokens=3, eos_token_id=0))
    5 6
    (the model ended its answer after 3 tokens, end-of-sequence token included)
    """
    from ...decoding.inputs import eos_set

    tokens = [int(t) for t in tokens]
    text = tokenizer.decode(tokens, skip_special_tokens=True).rstrip()
    if tokens and tokens[-1] in eos_set(eos_token_id):
        return (f"{text}\n(the model ended its answer after {len(tokens)} tokens, "
                "end-of-sequence token included)")  # fmt: skip
    if len(tokens) >= max_new_tokens:
        span = _tail_loop(tokens)
        if span is not None:
            return (f"{text} [...]\n(cut at MAX_NEW_TOKENS = {max_new_tokens} new tokens; its "
                    f"last {span} tokens repeat, word for word, text it wrote earlier: the model "
                    "was looping, as small models do under greedy decoding, not about to finish "
                    "-- such repeats are what a copying drafter like prompt lookup proposes)")  # fmt: skip
        return (f"{text} [...]\n(cut at MAX_NEW_TOKENS = {max_new_tokens} new tokens, before the "
                "model finished its answer)")  # fmt: skip
    return f"{text}\n(stopped after {len(tokens)} tokens)"


def _tail_loop(tokens: Sequence[int], *, min_span: int = 8) -> int | None:
    """How many of the last tokens repeat, word for word, text the answer already wrote
    earlier (the longest such tail, at least ``min_span`` tokens); None when the tail is new.

    >>> _tail_loop([9, 8] + [1, 2, 3, 4] * 4)
    12
    >>> _tail_loop([5, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    8
    >>> _tail_loop(list(range(20))) is None
    True
    """
    seq = tuple(tokens)
    n = len(seq)

    def seen_before(length: int) -> bool:
        tail = seq[n - length :]
        return any(seq[i : i + length] == tail for i in range(n - length))

    # a tail seen before has every shorter tail seen before too: grow it while it holds
    length = 0
    while length + 1 < n and seen_before(length + 1):
        length += 1
    return length if length >= min_span else None


def draft_sources(trace: Any) -> str:
    """Where a run's tested drafts came from: copies (a point-mass q, e.g. prompt lookup) or
    a model (a real q: the head, a draft model), and how many of each the target rejected."""
    rows = [r for _, r in _tested(trace)]
    copied = [r for r in rows if not r.top_q_ids]
    modelled = [r for r in rows if r.top_q_ids]
    return (
        f"Drafts tested: {len(copied)} copied (q = 1 at the copy), {sum(not r.accepted for r in copied)} "
        f"of them rejected; {len(modelled)} drawn from a model with a real q, "
        f"{sum(not r.accepted for r in modelled)} of them rejected."
    )


def opening_step(trace: Any, *, real_q: bool = True) -> int | None:
    """The step a step-through should open on: the first whose tested draft with a real q
    (``real_q``; any draft otherwise) was rejected, else the first with such a draft; None
    when no step has one (the explorer then opens where it likes)."""
    rows = [(st, r) for st, r in _tested(trace) if r.top_q_ids or not real_q]
    rejected = [st for st, r in rows if not r.accepted]
    return (rejected or [st for st, _ in rows] or [None])[0]


def steps_to_decide(
    first: int, total: int, *, often: float = 0.5, limit: int = 10_000
) -> int | None:
    """How many rejecting steps a run would need for claim 10's interval to leave ``often``
    out, if the share of first-token rejections stayed at ``first / total``: the smallest n
    whose Wilson interval of ``round(n * first / total)`` of n lies wholly above or below
    ``often``, and stays so for every larger n (rounding lets a single n decide by luck: at 29
    of 45, 43 steps clear 50% but 44, 45 and 47 do not -- the answer there is 48); None when no
    n up to ``limit`` does (a share at or very near ``often``).

    A "cannot tell" line is only useful with this number: it says whether a bigger run (the
    notebook's default size) can be expected to decide, or whether no practical size would.

    >>> steps_to_decide(5, 16)  # 31%: a 16-step run straddles 50%
    29
    >>> steps_to_decide(8, 16) is None  # exactly 50%: no size decides
    True
    >>> steps_to_decide(29, 45)  # 43 decides by rounding luck, 44, 45 and 47 do not
    48
    """
    if total <= 0:
        return None
    share = first / total

    def decides(n: int) -> bool:
        lo, hi = acceptance_interval(round(n * share), n)
        return bool(lo > often or hi < often)

    n = 1
    while n <= limit:
        if not decides(n):
            n += 1
            continue
        # decided at n: it must hold on (the interval narrows, so a window of n more steps
        # past the last rounding miss is enough)
        miss = next((m for m in range(n + 1, min(2 * n, limit) + 1) if not decides(m)), None)
        if miss is None:
            return n
        n = miss + 1
    return None


def first_token_rejections(
    rejection_positions: Sequence[int],
    *,
    often: float = 0.5,
    what: str = "rejecting steps",
    larger_size: str | None = None,
) -> ClaimLine:
    """Claim 10 on one run: of the steps that rejected a draft, the share whose first
    rejection hit the first drafted token, with its Wilson interval against ``often``: above
    it, the article's cue to shorten gamma or change the drafter fires (supports); below it,
    the first guesses hold up and the cue's case is not shown here; otherwise, or with nothing
    rejected, cannot tell. A "cannot tell" says how many rejecting steps would decide at the
    measured share (:func:`steps_to_decide`), and, with ``larger_size`` (e.g. "the default
    size, 96 tokens, about twice the rejecting steps of this 48-token run"), which run of
    the notebook is the one to look at -- so that a reader is not left to guess whether any
    size decides.

    >>> first_token_rejections([9, 1, 0, 0]).verdict
    'supports'
    >>> first_token_rejections([0, 0, 0, 0]).verdict
    'cannot tell'
    """
    rej = [int(r) for r in rejection_positions]
    total, first = sum(rej), (rej[0] if rej else 0)
    if not total:
        return ClaimLine(
            10,
            CANNOT_TELL,
            "Claim 10: no step rejected a draft, so nothing to say about where rejections "
            "happen: cannot tell at this size.",
        )
    lo, hi = acceptance_interval(first, total)
    share = acceptance_text(first, total, what=f"{what} rejected the first drafted token")
    if lo > often:
        verdict, tail = (
            SUPPORTS,
            (
                f"more than {often:.0%} even at the interval's low end: supports claim 10's cue -- "
                "a shorter gamma or another drafter would waste fewer drafts"
            ),
        )
    elif hi < often:
        verdict, tail = (
            NOT_SHOWN,
            (
                f"below {often:.0%} even at the interval's high end: the drafter's first guesses "
                "hold up, so claim 10's cue to shorten gamma does not fire here (not shown)"
            ),
        )
    else:
        need = steps_to_decide(first, total, often=often)
        if need is None:
            decide = f"; at a share this close to {often:.0%} no practical run size would decide"
        else:
            decide = (
                f"; at the measured share ({first / total:.0%}) about {need} rejecting steps "
                f"would decide (this run had {total})"
            )
            if larger_size:
                decide += f" -- {larger_size}"
        verdict, tail = (
            CANNOT_TELL,
            (
                f"the interval straddles {often:.0%}: cannot tell at this size whether rejections "
                f"concentrate on the first drafted token{decide}"
            ),
        )
    return ClaimLine(
        10,
        verdict,
        f"Claim 10: rejections by draft position (1 = first drafted token) {rej}; {share}: {tail}.",
    )


def greedy_identity(
    plain_tokens: Sequence[int], spec_tokens: Sequence[int], *, what: str
) -> ClaimLine:
    """Claim 7 on one greedy pair of outputs: identical token for token, or the first
    difference (a difference contradicts the claim unless numerics or ties differ)."""
    a, b = list(plain_tokens), list(spec_tokens)
    if a == b:
        return ClaimLine(
            7,
            SUPPORTS,
            f"Claim 7: greedy outputs identical token for token: True ({len(b)} tokens, {what}): "
            "supports claim 7 on this prompt.",
        )
    diff = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return ClaimLine(
        7,
        CONTRADICTS,
        f"Claim 7: greedy outputs identical token for token: False (first difference at "
        f"generated token {diff + 1}): contradicts claim 7 unless verification, numerics or "
        "tie-breaking differ between the two runs (notebooks 05 and 06 tell which).",
    )


# -- 01 / 04: a sample against an exact law ----------------------------------------------------


def exact_law_check(gof: Any, *, level: float, what: str) -> ClaimLine:
    """Claim 6 from a chi-square test of a lossless rule's samples against the exact law:
    rejected at ``level`` contradicts it (or is a false alarm at that rate); not rejected
    supports it for departures the sample could see (TV at 90% power), stated."""
    mdt = min_detectable_tv(gof.expected / gof.expected.sum(), gof.n, alpha=level)
    if gof.pvalue < level:
        verdict, tail = (
            CONTRADICTS,
            (
                f"the sample REJECTS the exact law at level {level:g}: contradicts claim 6 (or a "
                f"1-in-{1 / level:.0f} false alarm)"
            ),
        )
    elif not np.isfinite(mdt):
        verdict, tail = CANNOT_TELL, "cannot tell at this size (no departure is detectable)"
    else:
        verdict, tail = (
            SUPPORTS,
            (
                f"no departure at level {level:g}: supports claim 6 at this sample size for "
                f"departures of TV >= {mdt:.3f} (seen 90% of the time); smaller ones cannot be told "
                "at this size"
            ),
        )
    return ClaimLine(
        6,
        verdict,
        f"Claim 6: {what}: chi-square {gof.statistic:.1f} on {gof.dof} dof, p = {gof.pvalue:.3f}: "
        f"{tail}.",
    )


def theory_band_line(sims: Sequence[Any]) -> str:
    """Tokens per call against ``E = (1 - a^(g+1)) / (1 - a)`` over every simulated
    setting: the largest deviation in standard errors against the band that covers all of
    them 95% of the time (a Bonferroni band)."""
    from scipy.stats import norm

    z = [(s.tokens_per_call - s.theory) / s.tokens_per_call_se for s in sims]
    band = float(norm.ppf(1 - 0.05 / (2 * len(z))))
    worst = max(abs(v) for v in z)
    where = (
        f"consistent with E = (1 - alpha^(gamma+1)) / (1 - alpha) (within the {band:.2f} SE band "
        f"that covers all {len(z)} settings 95% of the time)"
        if worst <= band
        else f"departs from the formula beyond the {band:.2f} SE band of {len(z)} settings"
    )
    return (
        f"Tokens per call: {len(z)} simulated (noise, gamma) settings, largest deviation from "
        f"theory {worst:.2f} standard errors: {where}."
    )


def toy_call_savings(sims: Sequence[Any], *, gamma: int) -> list[ClaimLine]:
    """Claim 1 on the exact toy, one line per draft quality at ``gamma``: fewer serial calls
    (supports) or not, the tokens per full call against theory and the acceptance against
    the exact alpha, each with its 95% interval."""
    lines = []
    for s in (s for s in sims if s.gamma == gamma):
        tested = sum(min(s.gamma, a + 1) for a in s.accepted)  # tests up to the first rejection
        lo, hi = acceptance_interval(sum(s.accepted), tested)
        half = 1.96 * s.tokens_per_call_se
        fewer = s.target_calls < s.new_tokens
        inside = abs(s.tokens_per_call - s.theory) <= half
        lines.append(
            ClaimLine(
                1,
                SUPPORTS if fewer else CONTRADICTS,
                f"Claim 1, noise {s.noise}: {s.new_tokens} tokens took {s.target_calls} serial "
                f"target calls instead of {s.new_tokens}, each scoring {gamma + 1} positions: "
                + (
                    f"{s.new_tokens / s.target_calls:.2f}x fewer serial calls, supports claim 1"
                    if fewer
                    else "no fewer serial calls, contradicts claim 1"
                )
                + f"; full gamma={gamma} steps gave {s.tokens_per_call:.2f} +- {half:.2f} tokens "
                f"per call against E = {s.theory:.2f} (theory {'inside' if inside else 'OUTSIDE'} "
                f"the 95% interval); {acceptance_text(sum(s.accepted), tested, what='tests accepted')}"
                f" against the exact alpha {s.alpha:.3f} "
                f"({'inside' if lo <= s.alpha <= hi else 'OUTSIDE'} the interval).",
            )
        )
    return lines


# -- 02: a sampled run's tests -----------------------------------------------------------------


def acceptance_vs_probabilities(trace: Any) -> str:
    """The accepted share of a sampled run's tests against the mean of their ``min(1, p/q)``:
    inside the share's interval is what a correct rule gives (a wide interval is weak
    evidence; notebook 05 tests the law properly)."""
    rows = [r for s in trace.steps for r in s.positions if r.evaluated and r.draft_token >= 0]
    if not rows:
        return "No draft was tested: cannot compare the accepted share with min(1, p/q)."
    k = sum(r.accepted for r in rows)
    mean_a = float(np.mean([r.accept_prob for r in rows]))
    lo, hi = acceptance_interval(k, len(rows))
    agree = (
        "inside that interval: consistent with the rule accepting at the rate its probabilities "
        "say, at this sample size" + (" (a wide interval: weak evidence)" if hi - lo > 0.3 else "")
        if lo <= mean_a <= hi
        else "outside that interval: the accepted share departs from what the probabilities say "
        "(about a 1-in-20 chance for a correct rule; notebook 05 tests it properly)"
    )
    return (
        f"Over the tests: {acceptance_text(k, len(rows))}; the mean of min(1, p/q) over the same "
        f"tests is {mean_a:.3f}, {agree}."
    )


def acceptance_by_position(trace: Any, gamma: int) -> str:
    """P(accept | draft position reached) of a run, per draft position 1..``gamma``, each with
    its count and 95% interval: the tests that reached the position and were decided there."""
    at = [
        [
            r.accepted
            for s in trace.steps
            for r in s.positions[j : j + 1]
            if r.evaluated and r.draft_token >= 0
        ]
        for j in range(gamma)
    ]
    return (
        "P(accept | draft position reached): "
        + "; ".join(
            f"position {j + 1}: {acceptance_text(sum(a), len(a))}" for j, a in enumerate(at)
        )
        + "."
    )


def first_rejection(trace: Any, tokenizer: Any = None) -> str:
    """The run's first rejection in words: the draft, its p and q, min(1, p/q) against the
    uniform draw, and the token the residual gave (or that the run ended there)."""
    from ...views.labels import token_label

    s = next((s for s in trace.steps if s.drafted and s.accepted < s.drafted), None)
    if s is None:
        return "No draft was rejected in this run."
    r = s.positions[s.accepted]
    fix = (
        f"the residual gave {token_label(r.emitted_token, tokenizer)!r}"
        if r.emitted_token >= 0
        else "the run ended there (length limit)"
    )
    return (
        f"First rejection (step {s.step}, draft position {s.accepted + 1}): draft "
        f"{token_label(r.draft_token, tokenizer)!r} had p = {r.p_target:.3g}, q = {r.q_draft:.3g}, "
        f"so min(1, p/q) = {r.accept_prob:.3f} and u = {r.u:.3f} rejected it; {fix}."
    )


def p_phrase(p: float) -> str:
    """A p-value as printed in a verdict line: ``"p = 0.0031"``, and ``"p < 1e-300"`` where the
    double underflowed to 0 -- the test did not find the data impossible, the number ran out
    of digits.

    >>> p_phrase(0.00312), p_phrase(0.0)
    ('p = 0.0031', 'p < 1e-300')
    """
    return f"p = {p:.2g}" if p > 0 else "p < 1e-300"


def pvalues_shown(
    pvalues: Sequence[float], impossible: Sequence[object] | None = None
) -> list[str]:
    """A table's p-value column as :func:`p_phrase` words it: ``"0 (impossible outcome)"``
    only where an outcome the law forbids was seen (p is exactly 0 then), ``"< 1e-300"`` for
    an underflow, else the number -- never ``0.000000e+00`` for both.

    >>> pvalues_shown([0.0, 0.0, 0.0012], impossible=[3, 0, 0])
    ['0 (impossible outcome)', '< 1e-300', '1.20e-03']
    """
    flags = list(impossible) if impossible is not None else [0] * len(pvalues)
    return [
        "0 (impossible outcome)" if p == 0 and bool(f) else "< 1e-300" if p == 0 else f"{p:.2e}"
        for p, f in zip(pvalues, flags, strict=True)
    ]
