"""Drafts from a model with another tokenizer: token-level intersection and string matching.

Two ways to let a draft model with its own vocabulary propose for a target (Timor et al., ICML
2025, arXiv 2502.05202):

* ``method="intersection"`` (TLI): the draft's distribution is restricted to the tokens whose
  *byte strings* also exist in the target vocabulary, renormalised, mapped to target ids and
  sampled from; ``q_draft`` is reported over the target vocabulary, so the usual lossless rule
  applies unchanged. Lossless under sampling and greedy.
* ``method="string"`` (SLEM, transformers' universal assisted generation): the draft continues
  the decoded text with its own tokens (greedy), the target re-tokenises that text and keeps it
  while it matches its own greedy choice. Greedy only: sampling is refused.

Why the intersection is exact: a step's output law is the target's whatever the draft proposes,
provided ``q_draft`` is the law each token was really drawn from, given the context and the
earlier drafts. Here the draft model always conditions on the canonical draft-side
tokenisation of the target's committed text (re-tokenised each step, so a committed target
token that is no single draft token is still seen as text), plus its own earlier drafts, which
the injective string map recovers from the target ids; the restricted, renormalised law pushed
through that map is what is sampled from and reported.

Tokens are compared by their decoded byte strings, not by display strings: SmolLM2 and Qwen
both use GPT-2-style byte-level BPE (``'Ġ'`` is a leading space, multi-byte characters may be
split across tokens), and two tokens match when they stand for the same bytes.

``mode`` selects a bug-zoo shortcut instead of the exact construction (see
:data:`CROSS_VOCAB_MODES`; the registered verifiers of the same names in
:mod:`specviz.verification.zoo` select them by ``verifier=``).

Example with two toy vocabularies::

    >>> import torch
    >>> from specviz.fixtures.toy import ToyLM
    >>> target_tok = StringTokenizer(["a", "b", "ab", "c"])
    >>> draft_tok = StringTokenizer(["a", "b", "c", "ba"])
    >>> drafter = CrossVocabDrafter(ToyLM.random(4, 1, seed=1), draft_tok, target_tok)
    >>> drafter.shared_tokens()  # (draft id, target id, string)
    [(0, 0, 'a'), (1, 1, 'b'), (2, 3, 'c')]
    >>> drafter.draft_ids(torch.tensor([2, 1, 0]))  # "ab" + "b" + "a" = "abba" on the draft side
    [0, 1, 3]
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from ..core.args import as_int
from ..core.runners import LMRunner, as_runner, vocab_size_of
from ..core.sampling import SamplingParams, logits_to_probs, sample
from .base import Draft, Drafter
from .coverage import coverage_along, coverage_by_category, target_mass_coverage
from .modes import check_draft_logits
from .vocabularies import StringTokenizer, Vocabulary, vocabulary_of

__all__ = [
    "CROSS_VOCAB_METHODS",
    "CROSS_VOCAB_MODES",
    "CrossVocabDrafter",
    "StringTokenizer",
    "Vocabulary",
    "coverage_along",
    "coverage_by_category",
    "target_mass_coverage",
    "vocabulary_of",
]

#: How a draft with another tokenizer proposes (``load_pair(..., cross_vocab=...)``).
CROSS_VOCAB_METHODS = ("intersection", "string")

#: How an intersection drafter builds its law: "exact", or a shortcut of the bug zoo.
CROSS_VOCAB_MODES = (
    "exact",
    # the shared tokens' probabilities reported without renormalising (sampling renormalises
    # them silently, as torch.multinomial does)
    "vocab_map_unrenormalized",
    # the sampled draft id passed to the target as the same number; q translated by string
    "vocab_map_by_id",
    # strings compared after stripping a leading space, so " b" and "b" are one token
    "vocab_map_lossy_strings",
)


def _strip_space(b: bytes | None) -> bytes | None:
    """The lossy normalisation of ``vocab_map_lossy_strings``: one leading space dropped."""
    if not b:
        return None
    out = b[1:] if b.startswith(b" ") else b
    return out or None


# ------------------------------------------------------------------------------ the drafter


@dataclass(frozen=True, eq=False)
class _Maps:
    """The read-only tables every fork shares: draft id -> target id per construction."""

    exact: torch.Tensor  # [V_d] target id of the same bytes, -1 if none
    lossy: torch.Tensor  # [V_d] target id after stripping a leading space (later ids win)
    lossy_last: tuple[torch.Tensor, torch.Tensor]  # (target ids, the last draft id mapped there)


class CrossVocabDrafter(Drafter):
    """A draft model with its own tokenizer, proposing target ids.

    Args:
        draft_model: a causal LM (or toy model) over the draft vocabulary.
        draft_tokenizer, target_tokenizer: transformers tokenizers or :class:`StringTokenizer`.
        target_vocab_size: width of the target's logits (default: the target tokenizer's size).
        method: ``"intersection"`` (lossless under sampling) or ``"string"`` (greedy only).
        mode: ``"exact"`` or a shortcut of :data:`CROSS_VOCAB_MODES` (intersection only).

    The draft keeps its own KV cache over the draft-side tokenisation of the context; before
    each proposal the committed text is re-tokenised and the cache cropped to the prefix it
    shares with that (tokenisation boundaries move when text is appended). ``resyncs``
    counts the proposals where the cache lost tokens it had already seen that way.
    ``source_ids`` / ``source_pieces`` of each draft are the draft-side id and string of
    every proposed target token (string matching: the draft token its first byte came from).
    """

    def __init__(
        self,
        draft_model: Any,
        draft_tokenizer: Any,
        target_tokenizer: Any,
        *,
        target_vocab_size: int | None = None,
        method: str = "intersection",
        mode: str = "exact",
        name: str | None = None,
    ) -> None:
        draft_width, target_vocab_size = _checked_arguments(
            draft_model, draft_tokenizer, target_tokenizer, target_vocab_size, method, mode
        )
        self.draft_model = draft_model
        self.method = method
        self.mode = mode
        self.vocab_size = target_vocab_size
        self.draft_vocab_size = draft_width
        self.target_vocab = vocabulary_of(target_tokenizer, target_vocab_size, "target")
        self.draft_vocab = vocabulary_of(draft_tokenizer, draft_width, "draft")
        self._maps = self._build_maps()
        if method == "intersection" and not bool((self._maps.exact >= 0).any()):
            raise ValueError(
                "the draft and target vocabularies share no token string: nothing to draft"
            )
        base = getattr(getattr(draft_model, "config", None), "name_or_path", None)
        base = base or getattr(draft_model, "name", type(draft_model).__name__)
        suffix = "" if mode == "exact" else f",{mode}"
        self.name = name or f"cross_vocab[{method}{suffix}]:{base}"
        self.params = SamplingParams()
        self.resyncs = 0
        # proposals whose context held text the draft tokenizer has no token for (left out of
        # what the draft sees: the draft law still is what it samples from, so verification
        # stays exact), and string-method drafts cut where the target has no token
        self.unencodable = 0
        self.cut_drafts = 0
        self._reset_state()

    own_tokenizer = True  # proposes target ids from another vocabulary (see check_vocab)

    # -- tables -------------------------------------------------------------------------
    def _build_maps(self) -> _Maps:
        tv, dv = self.target_vocab, self.draft_vocab
        exact = torch.full((len(dv),), -1, dtype=torch.long)
        seen: set[bytes] = set()
        for j, b in enumerate(dv.pieces):
            # a second draft id with the same bytes stays out: the map must be injective for
            # the target ids to say which draft tokens were drafted
            if b and b not in seen:
                seen.add(b)
                t = tv.id_of(b)
                if t is not None:
                    exact[j] = t
        lossy_key: dict[bytes, int] = {}
        for t, b in enumerate(tv.pieces):
            key = _strip_space(b)
            if key is not None:
                lossy_key[key] = t  # later ids overwrite: what a dict comprehension does
        lossy = torch.full((len(dv),), -1, dtype=torch.long)
        last: dict[int, int] = {}
        for j, b in enumerate(dv.pieces):
            key = _strip_space(b)
            t = lossy_key.get(key) if key is not None else None
            if t is not None:
                lossy[j] = t
                last[t] = j
        ts = torch.tensor(sorted(last), dtype=torch.long)
        js = torch.tensor([last[t] for t in sorted(last)], dtype=torch.long)
        return _Maps(exact, lossy, (ts, js))

    def shared_tokens(self) -> list[tuple[int, int, str]]:
        """(draft id, target id, string) of every token the intersection can propose."""
        ex = self._maps.exact
        return [
            (j, int(ex[j]), self.draft_vocab.show(j)) for j in (ex >= 0).nonzero()[:, 0].tolist()
        ]

    def reachable(self) -> torch.Tensor:
        """[V_target] bool: the target ids the intersection can propose (its coverage is
        the target probability mass on them)."""
        out = torch.zeros(self.vocab_size, dtype=torch.bool)
        ex = self._maps.exact
        out[ex[ex >= 0]] = True
        return out

    # -- state ---------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.runner: LMRunner = as_runner(self.draft_model)
        self._fed = torch.empty(0, dtype=torch.long)  # draft ids in the runner's cache
        self._memo: tuple[torch.Tensor, torch.Tensor] | None = None
        self._dev: dict[str, Any] = {}

    def fork(self) -> CrossVocabDrafter:
        """Same model, tables and mode; a cache of its own (re-synced on first proposal)."""
        twin = copy.copy(self)
        twin._reset_state()
        return twin

    def with_draft_mode(self, mode: str) -> CrossVocabDrafter:
        """A fork that builds its law the way ``mode`` says (the bug zoo's ``draft_mode``)."""
        if mode not in CROSS_VOCAB_MODES:
            raise ValueError(
                f"draft mode {mode!r} is not a cross-vocabulary mode (a same-vocabulary bug of "
                f"the zoo needs a model draft); choose from {CROSS_VOCAB_MODES}"
            )
        if self.method == "string" and mode != "exact":
            raise ValueError(
                f"draft mode {mode!r} is a shortcut of the intersection method; this drafter "
                "matches strings (load_pair(..., cross_vocab='intersection'))"
            )
        twin = self.fork()
        twin.mode = mode
        if mode != "exact":
            twin.name = f"cross_vocab[{self.method},{mode}]" + self.name.split("]", 1)[-1]
        return twin

    @property
    def deterministic(self) -> bool:
        return self.method == "string" or self.params.is_greedy

    @property
    def normalised_q(self) -> bool:  # type: ignore[override]
        """False for the zoo's shortcuts whose reported q loses mass on purpose
        (``vocab_map_unrenormalized``, ``vocab_map_lossy_strings``): the step's sum check lets
        them through so that the statistics can catch them."""
        return self.mode in ("exact", "vocab_map_by_id")

    def start(self, prompt: torch.Tensor, params: SamplingParams) -> None:
        if self.method == "string" and not params.is_greedy:
            raise ValueError(
                "cross_vocab='string' (string-level exact match) verifies by greedy matching "
                "only; with do_sample=True use cross_vocab='intersection', which is lossless "
                "under sampling"
            )
        self.params = params
        self._reset_state()

    # -- the draft side of the context ---------------------------------------------------------
    def draft_ids(self, context: Any) -> list[int]:
        """The canonical draft-side tokenisation of the target context's text."""
        return self._draft_context(self._target_ids(context)).tolist()

    def _target_ids(self, context: Any) -> torch.Tensor:
        """A context given by a user: 1-D target ids in ``[0, vocab_size)``."""
        ctx = torch.as_tensor(context if isinstance(context, torch.Tensor) else list(context))
        if ctx.dim() != 1 or ctx.dtype.is_floating_point or ctx.dtype == torch.bool:
            raise ValueError(
                f"context must be a 1-D sequence of target token ids, got shape "
                f"{tuple(ctx.shape)} of {ctx.dtype}"
            )
        ctx = ctx.long()
        if ctx.numel() and (int(ctx.min()) < 0 or int(ctx.max()) >= self.vocab_size):
            bad = int(ctx.min()) if int(ctx.min()) < 0 else int(ctx.max())
            raise ValueError(
                f"context holds token id {bad}, outside the target vocabulary "
                f"[0, {self.vocab_size}): pass target ids (the draft side is computed here)"
            )
        return ctx

    def _draft_context(self, context: torch.Tensor) -> torch.Tensor:
        memo = self._memo
        if memo is not None and memo[0].shape == context.shape and torch.equal(memo[0], context):
            return memo[1]
        ids, dropped = self.draft_vocab.encode_lenient(self.target_vocab.text(context.tolist()))
        self.unencodable += dropped > 0
        if not ids:
            raise ValueError(
                "the context has no text the draft tokenizer can see (e.g. only target special "
                "tokens the draft lacks): give the prompt some text"
            )
        out = torch.tensor(ids, dtype=torch.long)
        self._memo = (context.clone(), out)
        return out

    def _sync(self, ids: torch.Tensor) -> torch.Tensor:
        # crop the cache to the longest prefix it shares with ``ids``; return the rest
        m = min(self._fed.numel(), ids.numel() - 1)  # always re-feed >= 1 token
        same = (self._fed[:m] == ids[:m]).long()
        keep = int(same.cumprod(0).sum()) if m else 0
        if keep < self.runner.length:
            if keep < m:
                self.resyncs += 1
            self.runner.crop(keep)
        self._fed = self._fed[:keep]
        return ids[keep:]

    def _tables(self, device: torch.device) -> dict[str, Any]:
        key = str(device)
        if key not in self._dev:
            mp = self._maps
            ex = mp.exact.to(device)
            lossy = mp.lossy.to(device)
            self._dev[key] = {
                "exact": ex,
                "reach": ex >= 0,
                "lossy": lossy,
                "lossy_reach": lossy >= 0,
                "lossy_last": tuple(t.to(device) for t in mp.lossy_last),
                # a draft id beyond the target's vocabulary has no same-numbered token
                "by_id": torch.where(
                    torch.arange(ex.numel(), device=device) < self.vocab_size,
                    torch.arange(ex.numel(), device=device),
                    -1,
                ),
            }
        return self._dev[key]

    # -- the law: one function for the sampler and the exact law -------------------------------
    def laws(
        self, draft_logits: torch.Tensor, params: SamplingParams, mode: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """From the draft's logits ([V_d]): the law a draft id is drawn from ([V_d]), the
        target id each draft id is proposed as ([V_d], -1: never drawn) and the q_draft
        reported over the target vocabulary ([V_target]). Exact: the reported q is the drawn
        law pushed through the map; each shortcut breaks that in its own way."""
        mode = self.mode if mode is None else mode
        tb = self._tables(draft_logits.device)
        logits = draft_logits.float()[: tb["exact"].numel()]
        V = self.vocab_size
        if mode == "vocab_map_lossy_strings":
            draw = logits_to_probs(logits.masked_fill(~tb["lossy_reach"], float("-inf")), params)
            ts, js = tb["lossy_last"]
            reported = torch.zeros(V, dtype=draw.dtype, device=draw.device)
            reported[ts] = draw[js]  # one draft string per target id wins; the others are lost
            return draw, tb["lossy"], reported
        reach, ex = tb["reach"], tb["exact"]
        if mode == "vocab_map_unrenormalized":
            full = logits_to_probs(logits, params)
            kept = full * reach
            total = kept.sum()
            draw = kept / total if float(total) > 0 else self._exact_draw(logits, reach, params)
            reported = torch.zeros(V, dtype=full.dtype, device=full.device)
            reported[ex[reach]] = kept[reach]
            return draw, ex, reported
        draw = self._exact_draw(logits, reach, params)
        reported = torch.zeros(V, dtype=draw.dtype, device=draw.device)
        reported[ex[reach]] = draw[reach]
        if mode == "vocab_map_by_id":
            return draw, tb["by_id"], reported
        return draw, ex, reported

    @staticmethod
    def _exact_draw(logits: torch.Tensor, reach: torch.Tensor, params: SamplingParams):
        # restrict first, then temperature / top-k / top-p over what can be proposed
        return logits_to_probs(logits.masked_fill(~reach, float("-inf")), params)

    @torch.inference_mode()
    def proposal_law(
        self, context: Any, params: SamplingParams, mode: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exactly what the first draft of a step does after ``context``: (the law of the
        proposed target id, the q_draft reported), both [V_target] float64 on the CPU."""
        ctx = self._target_ids(context)
        runner = as_runner(self.draft_model)
        logits = runner.extend(self._draft_context(ctx).to(runner.device), 1)[-1]
        draw, token_of, reported = self.laws(logits, params, mode)
        draw, token_of = draw.double().cpu(), token_of.cpu()
        ok = token_of >= 0
        if float(draw[~ok].sum()) > 0:
            raise ValueError(f"{self.name}: the draft can draw ids no target token stands for")
        s = torch.zeros(self.vocab_size, dtype=torch.float64)
        s.index_add_(0, token_of[ok], draw[ok])
        return s, reported.double().cpu()

    def _target_side(self, text: bytes, starts: list[int]) -> list[int]:
        """The draft's text re-tokenised by the target; cut before the first draft token whose
        bytes the target has no token for (counted in ``cut_drafts``)."""
        try:
            return self.target_vocab.encode(text)
        except ValueError:
            self.cut_drafts += 1
        for cut in reversed(starts):  # the longest prefix of whole draft tokens that encodes
            try:
                return self.target_vocab.encode(text[:cut])
            except ValueError:
                continue
        return []

    # -- proposing -------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        pending = self._sync(self._draft_context(context))
        logits = self.runner.extend(pending.to(self.runner.device), 1)[-1]
        if self.method == "string":
            return self._propose_string(logits, pending, k)
        greedy = self.params.is_greedy
        source, tokens, qs = [], [], []
        for i in range(k):
            check_draft_logits(logits, self.name)
            draw, token_of, reported = self.laws(logits, self.params)
            j = draw.argmax() if greedy else sample(draw, generator)
            source.append(j)
            tokens.append(token_of[j])
            qs.append(reported)
            if i + 1 < k:
                logits = self.runner.extend(j.view(1), 1)[-1]
        if not k:
            return Draft(torch.empty(0, dtype=torch.long))
        drafted = torch.stack(source).cpu()  # the one host sync of this draft
        # the runner has seen pending and every draft token but the last
        self._fed = torch.cat([self._fed, pending.cpu(), drafted[: k - 1]])
        ids = drafted.tolist()
        return Draft(
            torch.stack(tokens).cpu(),
            None if greedy else torch.stack(qs),
            tuple(ids),
            tuple(self.draft_vocab.show(j) for j in ids),
        )

    def _propose_string(self, logits: torch.Tensor, pending: torch.Tensor, k: int) -> Draft:
        if not k:
            return Draft(torch.empty(0, dtype=torch.long))
        drafted = []
        for i in range(k):
            check_draft_logits(logits, self.name)
            j = logits[: self.draft_vocab_size].argmax()
            drafted.append(j)
            if i + 1 < k:
                logits = self.runner.extend(j.view(1), 1)[-1]
        ids = torch.stack(drafted).cpu()
        self._fed = torch.cat([self._fed, pending.cpu(), ids[: k - 1]])
        ids_l = ids.tolist()
        # the draft's text, re-tokenised by the target; each target token remembers the draft
        # token its first byte came from
        starts, text = [], b""
        for j in ids_l:
            starts.append(len(text))
            text += self.draft_vocab.pieces[j] or b""
        target = [t for t in self._target_side(text, starts) if t < self.vocab_size][:k]
        src, pos = [], 0
        for t in target:
            owner = max(i for i, s in enumerate(starts) if s <= pos)
            src.append(ids_l[owner])
            pos += len(self.target_vocab.pieces[t] or b"")
        return Draft(
            torch.tensor(target, dtype=torch.long),
            None,
            tuple(src),
            tuple(self.draft_vocab.show(j) for j in src),
        )


def _checked_arguments(
    draft_model: Any,
    draft_tokenizer: Any,
    target_tokenizer: Any,
    target_vocab_size: Any,
    method: str,
    mode: str,
) -> tuple[int, int]:
    """:class:`CrossVocabDrafter`'s arguments checked: (draft logits width, target width)."""
    if method not in CROSS_VOCAB_METHODS:
        raise ValueError(
            f"unknown cross-vocabulary method {method!r}; choose from {CROSS_VOCAB_METHODS}"
        )
    if mode not in CROSS_VOCAB_MODES:
        raise ValueError(
            f"unknown cross-vocabulary draft mode {mode!r}; choose from {CROSS_VOCAB_MODES}"
        )
    if method == "string" and mode != "exact":
        raise ValueError(f"draft mode {mode!r} is a shortcut of the intersection method")
    for role, tok in (
        ("draft_tokenizer", draft_tokenizer),
        ("target_tokenizer", target_tokenizer),
    ):
        if not isinstance(tok, StringTokenizer) and not callable(getattr(tok, "get_vocab", None)):
            raise TypeError(
                f"{role} must be a tokenizer (transformers, or a StringTokenizer), got "
                f"{type(tok).__name__}"
            )
    if draft_model is None or not (
        callable(getattr(draft_model, "parameters", None)) or hasattr(draft_model, "make_runner")
    ):
        raise TypeError(
            f"draft_model must be a causal LM (or a toy model), got {type(draft_model).__name__}"
        )
    draft_width = vocab_size_of(draft_model)
    if not isinstance(draft_width, int):
        draft_width = len(draft_tokenizer)
    base = len(draft_tokenizer) if isinstance(draft_tokenizer, StringTokenizer) else (
        getattr(draft_tokenizer, "vocab_size", None)
    )  # fmt: skip
    if isinstance(base, int) and base > draft_width:
        raise ValueError(
            f"draft_tokenizer has {base} tokens but the draft model's logits have "
            f"{draft_width} rows: it is not the draft model's tokenizer (were the draft and "
            "target tokenizers swapped?)"
        )
    if target_vocab_size is None:
        target_vocab_size = len(target_tokenizer)
    if as_int(target_vocab_size) is None or as_int(target_vocab_size) < 1:
        raise TypeError(f"target_vocab_size must be an int >= 1, got {target_vocab_size!r}")
    target_vocab_size = as_int(target_vocab_size)
    return draft_width, target_vocab_size
