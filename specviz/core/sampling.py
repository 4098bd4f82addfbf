"""Logits -> the distribution that is actually sampled from.

Speculative sampling is only lossless if the draft's q and the target's p are the
distributions each token was *really* drawn from (transformers #47932 shipped raw q next
to a processed sample; vLLM #9834 processed the draft but not the target). So every
consumer -- draft, target, bonus token, residual and the plain baseline -- goes through
:func:`logits_to_probs` with the same :class:`SamplingParams`.

The processing matches transformers' ``generate``: temperature, then top-k, then top-p,
each with ``min_tokens_to_keep=1``, and each skipped exactly where ``generate`` skips it
(temperature == 1, top_k None, top_p in (None, 1.0)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .args import as_int, check_flag

__all__ = [
    "SamplingParams",
    "check_logits",
    "logits_to_probs",
    "sample",
    "sample_grouped",
    "sample_with_uniform",
    "sampling_params",
    "softmax",
]

# Rows shorter than this take the elementwise softmax (no thread-pool fork). It depends on
# the row length only, so one row gets the same bits alone or in a batch of any size.
_SHORT_ROW = 4096


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings with transformers' meaning. ``do_sample=False`` is greedy (argmax)."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        # a string flag ("False") would read as true; numpy / 0-d tensor numbers become Python's
        object.__setattr__(self, "do_sample", check_flag("do_sample", self.do_sample))
        t = self.temperature
        if isinstance(t, (bool, str)) or as_number(t) is None:
            raise ValueError(
                f"temperature must be a number (> 0 when do_sample=True), got "
                f"{type(t).__name__} {t!r}"
            )
        object.__setattr__(self, "temperature", as_number(t))
        if self.do_sample:
            t = self.temperature
            if not math.isfinite(t) or t <= 0:
                raise ValueError(
                    f"temperature must be a finite number > 0 when do_sample=True, got {t!r} "
                    "(use do_sample=False for greedy decoding)"
                )
        if self.top_k is not None:
            k = as_int(self.top_k)
            if k is None or k < 1:
                # transformers reads top_k=0 as "off"; we refuse it so "off" is spelled None.
                raise ValueError(
                    f"top_k must be an integer >= 1 or None (no top-k), got {self.top_k!r}"
                )
            object.__setattr__(self, "top_k", k)
        if self.top_p is not None:
            p = self.top_p
            v = None if isinstance(p, (bool, str)) else as_number(p)
            if v is None or not (0.0 < v <= 1.0):
                raise ValueError(f"top_p must be in (0, 1], got {p!r}")
            object.__setattr__(self, "top_p", v)

    @property
    def is_greedy(self) -> bool:
        return not self.do_sample


def sampling_params(
    params: SamplingParams | None,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    *,
    defaults: SamplingParams | None = None,
) -> SamplingParams:
    """The settings of a public entry that takes ``params`` and the four keywords: ``params``
    when given, else the keywords. With both, a keyword away from its default (``defaults``,
    the entry's own) must agree with ``params``: a conflict is refused, never resolved
    silently.

    >>> sampling_params(SamplingParams(True, 0.7), True, 1.0, None, None).temperature
    0.7
    >>> sampling_params(SamplingParams(True, 0.7), True, 0.5, None, None)
    Traceback (most recent call last):
    ...
    ValueError: params=SamplingParams(do_sample=True, temperature=0.7, top_k=None, top_p=None) and temperature=0.5 disagree: give the setting once (in params, or as a keyword)
    """
    given = SamplingParams(do_sample, temperature, top_k, top_p)  # validated either way
    defaults = SamplingParams() if defaults is None else defaults
    if params is None:
        return given
    if not isinstance(params, SamplingParams):
        raise TypeError(
            f"params must be a specviz.SamplingParams, got {type(params).__name__} {params!r}"
        )
    for name in ("do_sample", "temperature", "top_k", "top_p"):
        value = getattr(given, name)
        if value != getattr(defaults, name) and value != getattr(params, name):
            raise ValueError(
                f"params={params!r} and {name}={value!r} disagree: give the setting once (in "
                "params, or as a keyword)"
            )
    return params


def as_number(x: object) -> float | int | None:
    """A real number (int, float, numpy number, 0-d tensor) as a Python int or float."""
    if isinstance(x, int) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if getattr(x, "shape", None) == () and hasattr(x, "item"):
        v = x.item()  # type: ignore[attr-defined]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    return None


def check_logits(logits: torch.Tensor, who: str) -> None:
    """Refuse NaN/inf logits: a softmax over them silently yields NaN probabilities."""
    if not bool(torch.isfinite(logits).all()):
        bad = (~torch.isfinite(logits)).nonzero()
        first = tuple(int(i) for i in bad[0].tolist())
        raise FloatingPointError(
            f"{who} produced non-finite logits (first at index {first}); "
            "check the model's dtype/weights -- specviz will not sample from NaN/inf"
        )


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax`` without its thread-pool fork on small tensors.

    ATen's softmax splits rows across threads whatever their size (grain size 0): on a few
    rows of a toy vocabulary the fork costs ~1000x the work, and on a busy machine a call
    measured 3 us one time and 1.5 ms the next (the spin-wait for a descheduled thread).
    Short rows (toy vocabularies) take the elementwise path, whose ops stay on the calling
    thread for small tensors; the choice depends on the row length only, so a row's result
    does not depend on how many rows are computed with it.
    """
    if x.shape[dim] >= _SHORT_ROW:
        return torch.softmax(x, dim=dim)
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    # [..., V] float32 logits -> processed logits with -inf for removed tokens.
    scores = logits
    if params.temperature != 1.0:
        scores = scores / params.temperature
    if params.top_k is not None:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=False)
        cum = softmax(sorted_scores).cumsum(dim=-1)
        remove_sorted = cum <= (1.0 - params.top_p)
        remove_sorted[..., -1:] = False  # min_tokens_to_keep = 1
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Return the sampling distribution for ``logits`` ([..., V]) as float32 probabilities.

    Greedy (``do_sample=False``) returns the one-hot of the argmax, i.e. the distribution
    greedy decoding samples from, so greedy and sampled paths share one code path where
    that is convenient. The raw softmax (T=1, no filtering) is what greedy *drafts* report
    only when a bug is requested on purpose (see ``verify.py``).
    """
    logits = logits.float()
    if params.is_greedy:
        idx = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, idx, 1.0)
    limit = _cold_limit(logits, params.temperature)
    if limit is not None:
        return limit
    return softmax(_warp(logits, params))


def _cold_limit(logits: torch.Tensor, temperature: float) -> torch.Tensor | None:
    """The T -> 0 limit (uniform over the tied maxima) when logits / T would overflow float32
    (a softmax of inf - inf is NaN, and sampling from NaN picks the last id every time)."""
    if temperature >= 1e-3:  # logits would have to exceed 3e35 to overflow
        return None
    finite = logits.masked_fill(~torch.isfinite(logits), 0.0)
    if float(finite.abs().amax()) / temperature < 1e37:
        return None
    top = logits == logits.amax(dim=-1, keepdim=True)
    return top.float() / top.sum(dim=-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token per row of ``probs`` ([..., V]) -> [...] int64.

    Inverse-CDF sampling with exactly one uniform per row from ``generator``: that one-draw
    contract is what lets the batched engine draw each row's uniform from the row's own
    generator and then sample all rows in one vectorised call, reproducing serial runs.
    """
    u = torch.rand(probs.shape[:-1], generator=generator, device=probs.device, dtype=torch.float64)
    return sample_with_uniform(probs, u)


def sample_with_uniform(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """probs [..., V], u [...] in [0, 1) -> the token whose CDF interval contains u."""
    cdf = probs.double().cumsum(-1)  # [..., V]; float64 so the tail keeps its mass
    total = cdf[..., -1]
    lo, hi = torch.aminmax(total)  # NaN propagates: fails the test below
    if not (float(lo) > 0 and math.isfinite(float(hi))):
        raise FloatingPointError(
            "cannot sample: the probabilities are NaN/inf or all zero (check the logits and "
            "the sampling parameters)"
        )
    x = (u.to(cdf.dtype) * total).unsqueeze(-1)
    idx = torch.searchsorted(cdf, x, right=True).squeeze(-1)  # first token with CDF > x
    vocab = probs.shape[-1]
    over = idx >= vocab
    if not bool(over.any()):
        return idx
    # u * total can round up to total: fall back to the last token with mass
    last = vocab - 1 - (probs.flip(-1) > 0).long().argmax(-1)
    return torch.where(over, last, idx)


def sample_grouped(laws: torch.Tensor, owner: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling of many rows from a few laws: row r draws from ``laws[owner[r]]``
    with its uniform ``u[r]``. laws [M, V] (unnormalised is fine: u is scaled by each law's
    total), owner [R] int64, u [R] float64 -> [R] int64.

    Each law's CDF is built once (not once per row that draws from it), and every row's
    token is exactly what :func:`sample_with_uniform` gives for that row alone (the same
    float64 prefix sums and comparisons), so batched rows reproduce serial runs bit for bit.
    """
    if owner.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=laws.device)
    cdf = laws.double().cumsum(-1)  # [M, V]
    total = cdf[:, -1]
    lo, hi = torch.aminmax(total)
    if not (float(lo) > 0 and math.isfinite(float(hi))):
        raise FloatingPointError(
            "cannot sample: the probabilities are NaN/inf or all zero (check the logits and "
            "the sampling parameters)"
        )
    owner = owner.to(laws.device)
    x = u.to(cdf.device, cdf.dtype) * total[owner]  # [R]
    M, R = laws.shape[0], owner.numel()
    if R == M and bool((owner == torch.arange(M, device=owner.device)).all()):
        idx = torch.searchsorted(cdf, x.view(-1, 1), right=True).view(-1)
    else:  # rows sorted by law, padded to the largest group: one batched search
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=M)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(R, device=owner.device) - starts[owner[order]]
        grid = torch.full((M, int(counts.max())), math.inf, dtype=cdf.dtype, device=cdf.device)
        grid[owner[order], slot] = x[order]
        found = torch.searchsorted(cdf, grid, right=True)  # [M, c]
        idx = torch.empty(R, dtype=torch.long, device=laws.device)
        idx[order] = found[owner[order], slot]
    vocab = laws.shape[-1]
    over = idx >= vocab
    if bool(over.any()):  # u * total rounded up to total: the last token with mass
        last = vocab - 1 - (laws.flip(-1) > 0).long().argmax(-1)  # [M]
        idx = torch.where(over, last[owner], idx)
    return idx
