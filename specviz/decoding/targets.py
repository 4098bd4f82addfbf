"""The target side of the step: one sequence on a single-sequence runner (rollback is a crop),
or many rows on the masked batch cache (rollback leaves holes; token trees verified with tree
attention).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ..core.batch_runners import BATCH_THREAD_TOKENS, batch_runner, batch_threads
from ..core.heap import reuse_freed_memory
from ..core.runners import LMRunner
from ..core.threads import torch_threads

__all__ = ["SingleTarget", "BatchTarget", "prefill"]


# ------------------------------------------------------------------------------ targets


class SingleTarget:
    """A batch of one over a single-sequence :class:`~specviz.core.runners.LMRunner`:
    rollback is ``crop`` (static caches just move their write position)."""

    def __init__(self, runner: LMRunner) -> None:
        self.runner = runner
        self.device = runner.device

    def running(self, rows: int) -> contextlib.AbstractContextManager:
        """One sequence: the thread count the kernel choice set stays, memory as it is."""
        return contextlib.nullcontext()

    def start(self, prompts: list[torch.Tensor], hidden: bool):
        (prompt,) = prompts
        return [prompt], None  # the first verify pass also prefills the prompt

    def forward(self, feeds: list[torch.Tensor], num_logits: int, hidden: bool):
        (feed,) = feeds
        self._before = self.runner.length
        out = self.runner.extend(feed, num_logits, return_hidden=True) if hidden else None
        if out is None:
            return self.runner.extend(feed, num_logits)[None], None  # [1, k+1, V]
        logits, h = out
        return logits[None], h[None]

    def forward_tree(self, feeds, parents, hidden):
        raise TypeError(
            "a drafter proposed a token tree to a single-sequence runner: tree drafters set "
            "proposes_trees = True so that the engine verifies them on its masked cache"
        )

    def select(self, parents: list[int]) -> None:
        if parents not in ([], [0]):
            raise AssertionError(f"a single-sequence target cannot fork rows ({parents})")

    def keep(self, kept: list[int]) -> None:
        if kept:
            self.runner.crop(self._before + kept[0])


class BatchTarget:
    """Many rows over a masked batch cache (:class:`~specviz.core.batch_runners.BatchRunner`):
    rollback leaves holes, finished rows leave, forks copy cache rows."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = _device_of(model)

    @contextlib.contextmanager
    def running(self, rows: int) -> Iterator[None]:
        """The settings of a whole run over ``rows`` rows: the torch thread count measured
        for big batched calls (:func:`~specviz.core.batch_runners.batch_threads`) -- for the
        sampling, verifying and recording of ``rows`` x V laws per step too, which on one
        thread took a third of a batched check's wall time -- and, for batches of
        ``BATCH_THREAD_TOKENS`` rows or more, freed memory kept for the next step's tensors
        (:func:`~specviz.core.heap.reuse_freed_memory`)."""
        with (
            torch_threads(batch_threads(self.model, rows)),
            reuse_freed_memory(rows >= BATCH_THREAD_TOKENS),
        ):
            yield

    def start(self, prompts: list[torch.Tensor], hidden: bool):
        """Prefill all but the last token of every group's prompt (a shared prompt once,
        its cache copied); return each group's pending last token (and, with ``hidden``,
        the prefilled tokens' hidden states per group)."""
        self.runner = batch_runner(self.model, len(prompts))
        feats = prefill(self.runner, prompts, hidden)
        return [p[-1:] for p in prompts], feats

    def can_defer(self) -> bool:
        """Whether :meth:`forward` may leave the last column's laws for later."""
        return self.runner.can_defer()

    def deferred_logits(self, rows: list[int]) -> torch.Tensor:
        """The last column's logits of these rows of the last deferred :meth:`forward`,
        [n, V]."""
        return self.runner.deferred_logits(torch.tensor(rows, dtype=torch.long))

    def forward(self, feeds: list[torch.Tensor], num_logits: int, hidden: bool, defer_last=False):
        """Every row's feed, left-aligned -> logits [G, num_logits, V] (``defer_last``: the
        first num_logits - 1 columns only, see :meth:`deferred_logits`) and, with ``hidden``,
        the hidden states."""
        G, m = len(feeds), max(f.numel() for f in feeds)
        tokens = torch.zeros(G, m, dtype=torch.long)
        valid = torch.zeros(G, m, dtype=torch.bool)
        for g, f in enumerate(feeds):
            tokens[g, : f.numel()] = f
            valid[g, : f.numel()] = True
        self._col0, self._width = self.runner.mask.shape[1], m
        if defer_last and m != num_logits:
            raise AssertionError("a deferred last column needs num_logits == the feed width")
        defer = {"defer_last": True} if defer_last else {}  # toy runners never defer
        out = self.runner.extend(tokens, valid, m, return_hidden=hidden, **defer)
        logits, h = out if hidden else (out, None)
        return logits[:, :num_logits], h  # rows are left-aligned: column j of row g is its j-th

    def forward_tree(self, feeds: list[torch.Tensor], parents: list[list[int]], hidden: bool):
        """One target call on every row's [pending, tree nodes] with tree attention; row j
        of each row's logits is the law after feed token j."""
        G, m = len(feeds), max(f.numel() for f in feeds)
        tokens = torch.zeros(G, m, dtype=torch.long)
        valid = torch.zeros(G, m, dtype=torch.bool)
        par = torch.full((G, m), -1, dtype=torch.long)
        for g, (f, pa) in enumerate(zip(feeds, parents, strict=True)):
            tokens[g, : f.numel()] = f
            valid[g, : f.numel()] = True
            par[g, : len(pa)] = torch.tensor(pa)
        self._col0, self._width = self.runner.mask.shape[1], m
        out = self.runner.extend_tree(tokens, valid, par, return_hidden=hidden)
        return out if hidden else (out, None)

    def keep_columns(self, cols: list[list[int]]) -> None:
        self.runner.keep_columns(self._col0, cols)

    def select(self, parents: list[int]) -> None:
        if parents != list(range(len(parents))) or len(parents) != self.runner.mask.shape[0]:
            if parents:
                self.runner.select(torch.tensor(parents, dtype=torch.long))

    def keep(self, kept: list[int]) -> None:
        for g, n in enumerate(kept):
            self.runner.mask[g, self._col0 + n : self._col0 + self._width] = False
        self.runner.trim()


def prefill(runner: Any, prompts: list[torch.Tensor], hidden: bool = False) -> Any:
    """Prefill all but the last token of each row's prompt into a batch runner: a shared
    prompt (the same tensor in every row) once with its cache copied, different prompts
    together with holes padding the shorter ones. With ``hidden``, returns each row's
    hidden states of its prefilled tokens ([m_b, H] each)."""
    B = len(prompts)
    if all(p is prompts[0] for p in prompts):
        m = prompts[0].numel() - 1
        if m <= 0:
            return [None] * B if hidden else None
        h = runner.prefill_shared(prompts[0][:-1], return_hidden=hidden)
        return [h[0]] * B if hidden else None
    width = max(p.numel() for p in prompts) - 1
    if width <= 0:
        return [None] * B if hidden else None
    tokens = torch.zeros(B, width, dtype=torch.long)
    valid = torch.zeros(B, width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, : p.numel() - 1] = p[:-1]
        valid[b, : p.numel() - 1] = True
    out = runner.extend(tokens, valid, 1, return_hidden=hidden)
    if not hidden:
        return None
    h = out[1]  # [B, width, H], each row's tokens left-aligned
    return [h[b, : p.numel() - 1] for b, p in enumerate(prompts)]


def _device_of(model: Any) -> torch.device:
    if hasattr(model, "make_runner"):  # toy models
        return torch.device("cpu")
    return next(model.parameters()).device
