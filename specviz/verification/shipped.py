"""The bug zoo's second wing: mistakes engines shipped in 2024-26, as chain verifiers.

Each rule below reproduces one published mistake (source in its description and in
``docs/bug_zoo.md``) with the verifier contract of :mod:`specviz.verification.base`
(``verify(tokens [k], q_draft [k, V] | None, p_target [k+1, V], generator) -> Verdict``), so
the engine, :func:`~specviz.checks.consistency_check`, the notebooks and the conformance kit
(:mod:`specviz.testing`) run them by name. They resolve through
:data:`~specviz.verification.base.PREFIXES` and stay out of
:data:`~specviz.verification.base.VERIFIERS`: the first wing's tables state every member there on
one first-token toy, and several of these need more than one position, one round or one row to
show (their stated settings and exact laws are in :mod:`specviz.effects.shipped`).

Where a bug lived in the *drafter* (the draft's random numbers reused), the rule reproduces its
law from the verifier's side, given the drafted token: that is exact, because conditioning the
drafter's noise on the token it produced is a distribution we can sample (see
:func:`verify_shared_noise`).

>>> from specviz.verification.base import get_verifier
>>> get_verifier("ensemble:0.25", greedy=False).name
'ensemble:0.25'
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from ..core.sampling import sample, sample_with_uniform
from .block import verify_block, verify_block_cumprod
from .lossless import _first_false, _gathered
from .lossless import verify_lossless as _verify_lossless
from .verdict import Verdict, VerifierSpec, VerifyFn

__all__ = ["MEMBER_NAMES", "SHIPPED_ZOO", "permuted_row_offsets", "shipped_verifier"]


def _ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p/q) in float64 (q > 0 wherever a draft was drawn)."""
    p_x, q_x = p_x.double(), q_x.double()
    return torch.where(q_x > 0, p_x / q_x.clamp_min(1e-300), torch.zeros_like(p_x)).clamp(max=1.0)


def _finish(tokens, p_target, generator, n, accept_prob, u, residual_of) -> Verdict:
    """``n`` drafts accepted: the bonus token from p_target[k], else one from ``residual_of(n)``."""
    k = tokens.numel()
    if n == k:
        return Verdict(k, int(sample(p_target[k], generator)), "bonus", accept_prob, u, None)
    law = residual_of(n)
    return Verdict(n, int(sample(law, generator)), "corrected", accept_prob, u, law)


def _norm_or(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = r.sum()
    return r / total if float(total) > 0.0 else fallback


def _standard_residual(q: torch.Tensor, p_target: torch.Tensor) -> Callable[[int], torch.Tensor]:
    return lambda n: _norm_or(torch.clamp(p_target[n] - q[n], min=0.0), p_target[n])


def _token_wise(tokens, q_draft, p_target, generator):
    """The lossless acceptance step: (q rows, accept_prob [k], u [k], n accepted)."""
    q, p_x, q_x = _gathered(tokens, q_draft, p_target)
    accept = _ratio(p_x, q_x)
    u = torch.rand(tokens.numel(), generator=generator, device=p_target.device, dtype=torch.float64)
    return q, accept, u, _first_false(u < accept)


# -- 1. OpenVINO GenAI validate_candidate: the ratio against an independent target sample ------


def verify_independent_target_ratio(tokens, q_draft, p_target, generator) -> Verdict:
    """Accept x iff u <= q(x) / p(y) with y ~ p drawn apart (OpenVINO GenAI ``validate_candidate``,
    since PR #1068). After a rejection the target is resampled in the right context (the kind
    model of the notes: the shipped code also handles it one position late, the next member)."""
    k = tokens.numel()
    q, _, q_x = _gathered(tokens, q_draft, p_target)
    pk = p_target[:k].double()  # [k, V]
    # P(accept x) = E_y min(1, q(x)/p(y)) over y ~ p, p(y) > 0
    ratio = (q_x.double()[:, None] / pk.clamp_min(1e-300)).clamp(max=1.0)  # [k, V]
    accept_prob = (pk * ratio).sum(-1)
    u = torch.full((k,), float("nan"), device=p_target.device, dtype=torch.float64)
    n = 0
    while n < k:
        y = int(sample(p_target[n], generator))
        u[n] = float(
            torch.rand((), generator=generator, device=p_target.device, dtype=torch.float64)
        )
        if not float(u[n]) <= float(q_x[n]) / float(p_target[n, y]):
            break
        n += 1
    return _finish(tokens, p_target, generator, n, accept_prob, u, lambda i: p_target[i])


# -- 2. a quantized, inclusive uniform (OpenVINO's 101 levels; SGLang #35771's coin <= ...) ------


def make_quantized_uniform(levels: int = 101) -> VerifyFn:
    """u drawn from ``levels`` values {0, 1/(L-1), ..., 1} and accepted when u <= min(1, p/q):
    P(accept) = (floor((L-1) r) + 1) / L, so a draft with p(x) = 0 is accepted with probability
    1/L (OpenVINO draws ``uniform_int_distribution(0, 100) / 100``; SGLang #35771 compared
    ``coin <= prob_acc`` and accepted p = 0 drafts when the coin was exactly 0)."""
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
        raise ValueError(
            f"quantized_uniform needs an integer number of levels >= 2, got {levels!r}"
        )

    def verify(tokens, q_draft, p_target, generator) -> Verdict:
        q, p_x, q_x = _gathered(tokens, q_draft, p_target)
        top = torch.floor(_ratio(p_x, q_x) * (levels - 1) + 1e-12)  # highest accepted level
        i = torch.randint(0, levels, (tokens.numel(),), generator=generator, device=p_target.device)
        n = _first_false(i.double() <= top)
        u = i.double() / (levels - 1)
        residual = _standard_residual(q, p_target)
        return _finish(tokens, p_target, generator, n, (top + 1) / levels, u, residual)

    return verify


# -- 3. OpenVINO #4190: the rejection handled one position late --------------------------------


def verify_one_position_late(tokens, q_draft, p_target, generator) -> Verdict:
    """After a rejection at position n the next token is drawn from p_target[n+1] -- the law
    that follows the *rejected* draft -- instead of the residual at n (OpenVINO GenAI #4190:
    "a word gets dropped and its predicted continuation kept in its place"; fix PR #4490)."""
    _, accept, u, n = _token_wise(tokens, q_draft, p_target, generator)
    return _finish(tokens, p_target, generator, n, accept, u, lambda i: p_target[i + 1])


# -- 4. transformers PR #28508: softmax of the residual -----------------------------------------


def verify_softmax_residual(tokens, q_draft, p_target, generator) -> Verdict:
    """The residual max(0, p - q) passed through softmax instead of being normalised
    (transformers PR #28508, 2024-01: "the paper normalizes this vector, as opposed to a
    softmax"): every zero-residual token gets mass e^0 / sum."""
    q, accept, u, n = _token_wise(tokens, q_draft, p_target, generator)

    def residual(i: int) -> torch.Tensor:
        return torch.softmax(torch.clamp(p_target[i] - q[i], min=0.0).double(), -1)

    return _finish(tokens, p_target, generator, n, accept, u, residual)


# -- 5. vLLM PR #54282: the draft's noise reused for the recovered token -----------------------


def _noise_given_draft(q_row: torch.Tensor, x: int, generator) -> torch.Tensor:
    """Exponential noise E [V] drawn conditionally on argmax(q / E) = x: the noise a Gumbel /
    exponential-race drafter used to produce x. With T_i = E_i / q_i the race times, min T ~
    Exp(1) and is independent of the argmin, and the losers' times exceed it by independent
    Exp(q_i) (memorylessness), so E_x = q_x m and E_i = q_i m + Exp(1) (q_i = 0 included)."""
    q = q_row.double()
    dev = q.device
    m = torch.empty((), dtype=torch.float64, device=dev).exponential_(generator=generator)
    extra = torch.empty(q.shape, dtype=torch.float64, device=dev).exponential_(generator=generator)
    e = q * m + extra
    e[x] = q[x] * m
    return e


def verify_shared_noise(tokens, q_draft, p_target, generator) -> Verdict:
    """The recovered token drawn with the same exponential race (Gumbel-max) noise that drew the
    draft: y = argmax(r / E) with E the draft's noise (vLLM MRV2; PR #47386 closed, PR #54282
    merged 2026-08 salts the draft stream). The residual under-weights the draft's close
    losers. Exact for any drafter: the noise is sampled conditionally on the drafted token."""
    q, accept, u, n = _token_wise(tokens, q_draft, p_target, generator)
    k = tokens.numel()
    if n == k:
        return _finish(tokens, p_target, generator, n, accept, u, None)
    r = torch.clamp(p_target[n].double() - q[n].double(), min=0.0)
    if float(r.sum()) <= 0.0:
        r = p_target[n].double()
    e = _noise_given_draft(q[n], int(tokens[n]), generator)
    score = torch.where(r > 0, r / e, torch.full_like(r, -1.0))
    return Verdict(n, int(score.argmax()), "corrected", accept, u, r / r.sum())


# -- 6. llama.cpp PR #27694: the random stream restarted every round ---------------------------


def verify_rng_reset_each_round(tokens, q_draft, p_target, generator) -> Verdict:
    """Every round draws its uniforms from a generator reseeded with the request's seed, so
    each round reuses the same numbers (llama.cpp PR #27694: ``common_sampler_reset`` restarted
    the draft RNG every round, which "drew the same random number on every round"; the shared
    seed also made draft and verifier share their first uniform). One round alone is correct;
    consecutive rounds are dependent. u[:k] decide acceptance, u[k] draws the final token."""
    k = tokens.numel()
    fresh = torch.Generator(device=p_target.device).manual_seed(generator.initial_seed())
    u = torch.rand(k + 1, generator=fresh, device=p_target.device, dtype=torch.float64)
    q, p_x, q_x = _gathered(tokens, q_draft, p_target)
    accept = _ratio(p_x, q_x)
    n = _first_false(u[:k] < accept)
    if n == k:
        return Verdict(k, int(sample_with_uniform(p_target[k], u[k])), "bonus", accept, u[:k], None)
    law = _norm_or(torch.clamp(p_target[n] - q[n], min=0.0), p_target[n])
    return Verdict(n, int(sample_with_uniform(law, u[k])), "corrected", accept, u[:k], law)


# -- 7. SGLang #12512: a stale q in the residual -----------------------------------------------

#: Per stream (keyed by its generator): the q rows of its previous round -- the buffer that
#: was not refreshed. Weak keys, so a finished generation leaves nothing behind.
_STALE_Q: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def verify_stale_q(tokens, q_draft, p_target, generator) -> Verdict:
    """The residual subtracts a q buffer left over from the stream's previous round (zeros in its
    first round, i.e. the target itself): SGLang spec-v2 passed ``torch.empty_like`` as the
    draft-probability scratch of the tree kernel, so the correction came from whatever the
    memory held ("output repetition", #12512; PR #12561 -> ``zeros_like``). Acceptance is
    correct; only the residual is stale."""
    q, accept, u, n = _token_wise(tokens, q_draft, p_target, generator)
    stale = _STALE_Q.get(generator)
    _STALE_Q[generator] = q.detach().clone()

    def residual(i: int) -> torch.Tensor:
        old = stale[i] if stale is not None and i < stale.shape[0] else torch.zeros_like(q[i])
        return _norm_or(torch.clamp(p_target[i] - old.to(p_target.dtype), min=0.0), p_target[i])

    return _finish(tokens, p_target, generator, n, accept, u, residual)


# -- 8. vLLM #14645: a ragged batch read through a permuted row map ----------------------------


def permuted_row_offsets(lengths: list[int]) -> list[int]:
    """Where each row's drafts are *read* from in the flat batch when the row map is built in
    order of decreasing length (a dict keyed by size) while the data were laid out in request
    order: the identity when all lengths are equal, a leak between rows otherwise.

    >>> permuted_row_offsets([2, 2]), permuted_row_offsets([1, 3])
    ([0, 2], [3, 0])
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable
    starts, s = [0] * len(lengths), 0
    for i in order:
        starts[i] = s
        s += lengths[i]
    return starts


def verify_rows_permuted(tokens_list, q_list, p_list, generators) -> list[Verdict]:
    """Every chain row of a batch at once, each verified (lossless rule) on the slice of the
    flat draft/q/p buffers that :func:`permuted_row_offsets` points it to; the bonus row stays
    the row's own (vLLM passes bonus tokens per request)."""
    ks = [int(t.numel()) for t in tokens_list]
    if len(set(ks)) <= 1:  # uniform lengths: the map is the identity
        return [_verify_lossless(t, q, p, g) for t, q, p, g in zip(tokens_list, q_list, p_list, generators, strict=True)]  # fmt: skip
    flat_t = torch.cat([t.to(p_list[0].device) for t in tokens_list])
    flat_q = torch.cat([_gathered(t, q, p)[0] for t, q, p in zip(tokens_list, q_list, p_list, strict=True)])  # fmt: skip
    flat_p = torch.cat([p[:k] for p, k in zip(p_list, ks, strict=True)])
    out = []
    for i, s in enumerate(permuted_row_offsets(ks)):
        k = ks[i]
        p_rows = torch.cat([flat_p[s : s + k], p_list[i][k : k + 1]])
        out.append(_verify_lossless(flat_t[s : s + k], flat_q[s : s + k], p_rows, generators[i]))
    return out


# -- 9. the labelled-lossy ensemble (transformers PR #45979, DIVERSED) -------------------------


def make_ensemble(weight: float = 0.5) -> VerifyFn:
    """Verify against v = w p + (1 - w) q (transformers ``assistant_ensemble_weight=w``,
    PR #45979, arXiv 2604.07622): acceptance 1 - w TV(p, q), output law v, so the bias is
    exactly (1 - w) TV(p, q). Lossy by design and labelled so."""
    w = float(weight)
    if not 0.0 <= w <= 1.0:
        raise ValueError(f"ensemble weight must be in [0, 1], got {weight!r}")

    def verify(tokens, q_draft, p_target, generator) -> Verdict:
        q, p_x, q_x = _gathered(tokens, q_draft, p_target)
        accept = (1.0 - w + w * _ratio(p_x, q_x).double()).clamp(max=1.0)
        accept = torch.where(q_x > 0, accept, torch.zeros_like(accept))
        u = torch.rand(
            tokens.numel(), generator=generator, device=p_target.device, dtype=torch.float64
        )
        n = _first_false(u < accept)
        # [v - q]+ = w [p - q]+: the same residual law as the lossless rule
        return _finish(tokens, p_target, generator, n, accept, u, _standard_residual(q, p_target))

    return verify


# -- the registry -----------------------------------------------------------------------------


def _spec(name, verify, description, lossless=False, **kw) -> VerifierSpec:
    return VerifierSpec(name, verify, lossless, description, **kw)


#: name -> (factory of the spec from the name's parameter or None, parameter's default).
_MEMBERS: dict[str, Callable[[str | None], VerifierSpec]] = {
    "independent_target_ratio": lambda a: _spec(
        "independent_target_ratio", verify_independent_target_ratio,
        "accept iff u <= q(x)/p(y), y ~ p drawn apart: p(x) never enters the test (OpenVINO "
        "GenAI validate_candidate, PR #1068, unchanged to 2026-08)",
    ),
    "quantized_uniform": lambda a: _spec(
        "quantized_uniform" if a is None else f"quantized_uniform:{int(a)}",
        make_quantized_uniform(101 if a is None else int(a)),
        f"u from {101 if a is None else int(a)} levels, accepted when u <= p/q (inclusive): "
        "p(x) = 0 drafts accepted with probability 1/levels (OpenVINO's 101 levels; SGLang "
        "#35771 coin <= prob_acc)",
    ),
    "one_position_late": lambda a: _spec(
        "one_position_late", verify_one_position_late,
        "after a rejection at n the token is drawn from p_target[n+1], the law after the rejected "
        "draft (OpenVINO GenAI #4190; fix PR #4490)",
    ),
    "softmax_residual": lambda a: _spec(
        "softmax_residual", verify_softmax_residual,
        "residual softmax(max(0, p - q)) instead of max(0, p - q) / sum (transformers PR #28508)",
    ),
    "shared_noise": lambda a: _spec(
        "shared_noise", verify_shared_noise,
        "the recovered token drawn with the draft's own Gumbel/exponential noise (vLLM MRV2, "
        "PR #47386 -> #54282)",
    ),
    "rng_reset_each_round": lambda a: _spec(
        "rng_reset_each_round", verify_rng_reset_each_round,
        "every round reuses the same uniforms (generator reseeded from the request seed each "
        "round; llama.cpp PR #27694)",
    ),
    "stale_q": lambda a: _spec(
        "stale_q", verify_stale_q,
        "the residual subtracts the q of the stream's previous round (an uninitialised / stale "
        "draft-probability buffer; SGLang #12512, PR #12561)",
    ),
    "ragged_row_permutation": lambda a: _spec(
        "ragged_row_permutation", _verify_lossless,
        "a batch's rows read the flat draft buffers through a row map sorted by length: right "
        "at batch 1 and with equal lengths, leaks between rows when lengths differ (vLLM #14645)",
        verify_rows=verify_rows_permuted,
    ),
    "block_verify": lambda a: _spec(
        "block_verify", verify_block,
        "block verification (Sun et al., arXiv 2403.10444, Alg. 2; vLLM MRV2 'block'): lossless, "
        "accepts at least as much as token verification",
        lossless=True,
    ),
    "block_verify_cumprod": lambda a: _spec(
        "block_verify_cumprod", verify_block_cumprod,
        "block verification done wrong: cumprod(min(1, p/q)) >= cumprod(u), the longest passing "
        "prefix kept, recovery from the token-wise residual (vllm-ascend #7807, fix PR #7808)",
    ),
    "ensemble": lambda a: _spec(
        "ensemble" if a is None else f"ensemble:{a}",
        make_ensemble(0.5 if a is None else float(a)),
        f"verify against w p + (1-w) q, w = {0.5 if a is None else float(a):g}: LOSSY by design, "
        "bias (1-w) TV(p, q) (transformers assistant_ensemble_weight, PR #45979)",
    ),
}  # fmt: skip

_PARAMETRISED = {"quantized_uniform", "ensemble"}


def shipped_verifier(name: str) -> VerifierSpec:
    """The spec of a shipped-mistake verifier by name (``"ensemble:0.3"``,
    ``"quantized_uniform:11"`` take a parameter)."""
    base, _, arg = str(name).partition(":")
    if base not in _MEMBERS:
        raise ValueError(
            f"unknown shipped-mistake verifier {name!r}; choose from {sorted(_MEMBERS)}"
        )
    if arg and base not in _PARAMETRISED:
        raise ValueError(f"verifier {base!r} takes no parameter, got {name!r}")
    if base == "ensemble" and arg:
        try:
            float(arg)
        except ValueError:
            raise ValueError(f"ensemble weight must be a number, got {arg!r}") from None
    if base == "quantized_uniform" and arg and not arg.isdigit():
        raise ValueError(f"quantized_uniform levels must be an integer, got {arg!r}")
    return _MEMBERS[base](arg or None)


#: The members' names (each resolves through :func:`shipped_verifier`, listed in
#: :data:`~specviz.verification.base.PREFIXES`).
MEMBER_NAMES: tuple[str, ...] = tuple(_MEMBERS)

#: Every shipped mistake at its stated parameter, by name.
SHIPPED_ZOO: dict[str, VerifierSpec] = {name: shipped_verifier(name) for name in _MEMBERS}
