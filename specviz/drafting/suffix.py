"""Suffix drafting with a memory that outlives one generation.

Prompt lookup only searches the current text. Repeated and agentic workloads (the same tool
call shapes, the same boilerplate, the same answer to a similar request) repeat across
*requests*, so :class:`SuffixDrafter` keeps every prompt and every generated token of a
session in one structure and drafts from the longest suffix of the current text that has
been seen before, anywhere (cf. SuffixDecoding, Oliaro et al. 2024).

The structure is a **depth-bounded suffix trie with occurrence counts** (:class:`SuffixTrie`):
every substring of length <= ``max_depth`` of every stored document is a path from the root,
and each node counts how often its substring occurred. Costs, with D = ``max_depth``:

* appending a token: O(D) (the nodes of the D suffixes ending at the new token are kept in a
  per-document "active" list, each extended by one child);
* longest match of the current suffix: O(D log D) dictionary hops (presence is monotone in
  the suffix length, so the length is found by binary search);
* a k-token proposal: O(k * branching) to pick the most frequent child at each step;
* memory: at most D new nodes per token (fewer when text repeats); ``max_nodes`` caps it.
  Past the cap the oldest documents are evicted first (their counts are subtracted, emptied
  nodes are freed), so the memory is a FIFO window over the session. Measured: ~275 bytes per
  node in CPython, so the default cap (400k nodes, D=16) is ~110 MB, or ~27k tokens of text
  that never repeats (repeated text costs less). The cap is checked after each token, so it
  can be exceeded by at most D nodes.

A suffix automaton would use O(n) memory without a depth bound, but keeping *continuation
counts* up to date online needs suffix-link propagation on every insert; the bounded trie
keeps counts exact with O(D) work, and D ~ 16-32 is all a drafter ever needs.

Sampling and q: by default proposals are deterministic (the most frequent continuation,
``q_draft=None``), which the verifier treats as point masses -- always lossless. With
``sample=True`` and ``do_sample=True`` each token is *drawn* from the continuation counts
(child count / sum of child counts) and exactly that law is reported as q; the expected
acceptance then is sum_x min(p, q) >= sum_x q(x) p(x) (what the same random draw would get if
reported as a point mass). Greedy decoding always takes the argmax (greedy matching ignores q).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core.sampling import SamplingParams
from .base import Draft, Drafter, TreeDraft

__all__ = ["SuffixDrafter", "SuffixTrie", "SuffixStats"]


class _Node:
    __slots__ = ("count", "last", "children")

    def __init__(self) -> None:
        self.count = 0
        self.last = 0  # stream position of the latest occurrence (ties go to the most recent)
        self.children: dict[int, _Node] | None = None


class _Doc:
    """A stored token sequence and the trie nodes of its current suffixes (lengths 1..D-1)."""

    __slots__ = ("tokens", "active", "frozen")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.active: list[_Node] = []  # active[i] is the node of tokens[-(i+1):]
        self.frozen = False  # set when this document alone exceeds the node cap


@dataclass(frozen=True)
class SuffixStats:
    documents: int
    tokens: int
    nodes: int
    evicted_documents: int


class SuffixTrie:
    """Occurrence counts of every substring (length <= ``max_depth``) of many documents."""

    def __init__(self, max_depth: int = 16, max_nodes: int = 400_000) -> None:
        if max_depth < 2:
            raise ValueError(f"max_depth must be >= 2, got {max_depth}")
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.root = _Node()
        self.nodes = 1
        self.docs: deque[_Doc] = deque()
        self.evicted = 0

    # -- building ------------------------------------------------------------------------
    def new_document(self, tokens: Sequence[int] = ()) -> _Doc:
        doc = _Doc()
        self.docs.append(doc)
        self.extend(doc, tokens)
        return doc

    def extend(self, doc: _Doc, tokens: Sequence[int]) -> None:
        for t in tokens:
            if doc.frozen:
                return
            self._append(doc, int(t))
            self._enforce_cap(doc)

    def _append(self, doc: _Doc, t: int) -> None:
        # The suffixes ending at t are (suffixes ending at the previous token) + t, and t alone.
        new_active: list[_Node] = []
        for parent in [self.root, *doc.active]:
            if parent.children is None:
                parent.children = {}
            child = parent.children.get(t)
            if child is None:
                child = parent.children[t] = _Node()
                self.nodes += 1
            child.count += 1
            child.last = self.root.count
            if len(new_active) < self.max_depth - 1:  # a depth-D node never gets children
                new_active.append(child)
        self.root.count += 1
        doc.active = new_active
        doc.tokens.append(t)

    def _enforce_cap(self, live: _Doc) -> None:
        while self.nodes > self.max_nodes:
            if self.docs[0] is live:  # only the live document is left: stop growing it
                live.frozen = True
                return
            self.remove(self.docs.popleft())
            self.evicted += 1

    def remove(self, doc: _Doc) -> None:
        """Subtract ``doc``'s occurrences (replaying its insertion) and free emptied nodes."""
        if doc in self.docs:
            self.docs.remove(doc)
        active: list[_Node] = []
        for t in doc.tokens:
            new_active: list[_Node] = []
            for parent in [self.root, *active]:
                child = parent.children[t]  # type: ignore[index]
                child.count -= 1
                if child.count == 0:
                    del parent.children[t]  # type: ignore[arg-type]
                    self.nodes -= 1
                if len(new_active) < self.max_depth - 1:
                    new_active.append(child)
            self.root.count -= 1
            active = new_active
        doc.tokens, doc.active = [], []

    # -- querying ------------------------------------------------------------------------
    def _lookup(self, seq: Sequence[int]) -> _Node | None:
        node = self.root
        for t in seq:
            nxt = node.children.get(t) if node.children else None
            if nxt is None:
                return None
            node = nxt
        return node

    def longest_match(self, seq: Sequence[int], max_len: int) -> tuple[_Node | None, int]:
        """The node of the longest suffix of ``seq`` (length <= max_len) that has a stored
        continuation, and that length. Binary search: if a suffix occurs followed by c, so does
        every shorter suffix, so "has a continuation" is monotone in the length."""
        lo, hi = 0, min(max_len, len(seq), self.max_depth - 1)
        best = self.root if self.root.children else None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            node = self._lookup(seq[len(seq) - mid :])
            if node is not None and node.children:
                lo, best = mid, node
            else:
                hi = mid - 1
        return (best, lo) if best is not None else (None, 0)

    def stats(self) -> SuffixStats:
        return SuffixStats(len(self.docs), self.root.count, self.nodes, self.evicted)


class SuffixDrafter(Drafter):
    """Drafts the most frequent continuation of the longest suffix seen before in the session.

    The memory persists across :func:`~specviz.speculative_generate` calls on the same object:
    ``start()`` opens a new document with the prompt, ``propose()`` appends the tokens committed
    since its last call (read off the context), and ``end()`` -- called by the engine when a
    generation finishes -- adds the final tokens. Use one object per session; make a new one
    to forget.

    Args:
        max_depth: trie depth D; a match plus its continuation spans at most D tokens.
        min_match: shortest suffix that may trigger a proposal (shorter: propose nothing).
        max_match: longest suffix considered (default D minus the proposal length).
        min_count: stop a proposal at a continuation seen fewer times than this.
        max_nodes: memory cap (trie nodes); oldest documents are evicted first.
        sample: draw from the continuation counts and report them as q when sampling (needs
            ``vocab_size``); otherwise propose deterministically with ``q_draft=None``.
        vocab_size: the target's logits width (q rows must match it).
    """

    def __init__(
        self,
        *,
        max_depth: int = 16,
        min_match: int = 1,
        max_match: int | None = None,
        min_count: int = 1,
        max_nodes: int = 400_000,
        sample: bool = False,
        vocab_size: int | None = None,
        branches: int = 1,
    ) -> None:
        if min_match < 1 or min_match >= max_depth:
            raise ValueError(f"need 1 <= min_match < max_depth, got {min_match}, {max_depth}")
        if sample and vocab_size is None:
            raise ValueError("sample=True needs vocab_size (q rows are [V] over the target vocab)")
        if isinstance(branches, bool) or not isinstance(branches, int) or branches < 1:
            raise ValueError(f"branches must be an integer >= 1, got {branches!r}")
        if branches > 1 and sample:
            raise ValueError("branches > 1 builds deterministic trees; use sample=False")
        self.branches = branches
        self.proposes_trees = branches > 1
        self.trie = SuffixTrie(max_depth, max_nodes)
        self.min_match = min_match
        self.max_match = max_match
        self.min_count = min_count
        self.sample = sample
        self.vocab_size = vocab_size
        self.params = SamplingParams()
        self._live: _Doc | None = None
        self.name = f"suffix(D={max_depth},m>={min_match}{',q' if sample else ''})" + (
            f"+{branches} branches" if branches > 1 else ""
        )

    # -- session memory --------------------------------------------------------------------
    def start(self, prompt: torch.Tensor, params: SamplingParams) -> None:
        self.params = params
        self._live = self.trie.new_document(prompt.tolist())

    def end(self, context: Sequence[int] | torch.Tensor) -> None:
        """Store the rest of the finished generation (``context`` = prompt + new tokens).
        The engine calls it when a generation ends; a second call with the same text (code
        written when the engine had no end hook) changes nothing."""
        ctx = context.tolist() if isinstance(context, torch.Tensor) else list(context)
        if self._live is None and self.trie.docs and self.trie.docs[-1].tokens == ctx:
            return
        self._sync(ctx)
        self._live = None

    def remember(self, tokens: Sequence[int] | torch.Tensor) -> None:
        """Add a whole document (e.g. a finished request replayed from a cache, or a corpus)."""
        toks = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        self.trie.new_document(toks)

    def _sync(self, context: Sequence[int] | torch.Tensor) -> list[int]:
        ctx = context.tolist() if isinstance(context, torch.Tensor) else list(context)
        doc = self._live
        n = len(doc.tokens) if doc is not None else 0
        tail = min(n, 32)  # committed tokens never change: a short check catches misuse
        if doc is None or len(ctx) < n or ctx[n - tail : n] != doc.tokens[n - tail :]:
            self._live = self.trie.new_document(ctx)
        else:
            self.trie.extend(doc, ctx[n:])
        return ctx

    # -- drafting --------------------------------------------------------------------------
    def propose(
        self, context: torch.Tensor, k: int, generator: torch.Generator
    ) -> Draft | TreeDraft:
        ctx = self._sync(context)
        if self.branches > 1:
            return self._tree(ctx, k)
        use_q = self.sample and not self.params.is_greedy
        tail = ctx[-self.trie.max_depth :]
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        node: _Node | None = None
        while len(tokens) < k:
            if node is None or not node.children:
                node = self._match(tail + tokens, k - len(tokens))
                if node is None:
                    break
            picked = self._pick(node, generator, use_q)
            if picked is None:
                break
            tok, node, q = picked
            tokens.append(tok)
            if q is not None:
                qs.append(q)
        ids = torch.tensor(tokens, dtype=torch.long)
        return Draft(ids, torch.stack(qs) if use_q and tokens else None)

    def _tree(self, ctx: list[int], k: int) -> TreeDraft:
        """The ``branches`` most frequent continuations of the longest matching suffix, each
        followed further by its most frequent continuation: a deterministic token tree."""
        tokens: list[int] = []
        parents: list[int] = []
        node = self._match(ctx[-self.trie.max_depth :], k) if k > 0 else None
        if node is not None:
            kids = sorted(
                self._candidates(node).items(), key=lambda kv: (-kv[1].count, -kv[1].last)
            )
            for tok, child in kids[: self.branches]:
                tokens.append(tok)
                parents.append(-1)
                seq, cur = [tok], child
                while len(seq) < k:
                    nxt = self._pick(cur, None, False) if cur.children else None
                    if nxt is None:
                        cur = self._match(ctx[-self.trie.max_depth :] + seq, k - len(seq))
                        nxt = None if cur is None else self._pick(cur, None, False)
                        if nxt is None:
                            break
                    t, cur, _ = nxt
                    tokens.append(t)
                    parents.append(len(tokens) - 2)
                    seq.append(t)
        return TreeDraft(torch.tensor(tokens, dtype=torch.long),
                         torch.tensor(parents, dtype=torch.long), None, "deterministic")  # fmt: skip

    def _match(self, seq: list[int], room: int) -> _Node | None:
        cap = self.trie.max_depth - room  # leave depth for the continuation
        if self.max_match is not None:
            cap = min(cap, self.max_match)
        node, m = self.trie.longest_match(seq, max(cap, self.min_match))
        return node if node is not None and m >= self.min_match else None

    def _candidates(self, node: _Node) -> dict[int, _Node]:
        kids = node.children or {}
        if self.min_count <= 1:
            return kids
        return {t: c for t, c in kids.items() if c.count >= self.min_count}

    def _pick(
        self, node: _Node, generator: torch.Generator, use_q: bool
    ) -> tuple[int, _Node, torch.Tensor | None] | None:
        """The next drafted token, its node, and the law it was drawn from (None: a point
        mass). The ``min_count`` filter is applied *before* drawing, so the reported q is the
        law the token really came from."""
        kids = self._candidates(node)
        if not kids:
            return None
        if not use_q:
            # Most frequent continuation; ties go to the most recent one.
            tok, child = max(kids.items(), key=lambda kv: (kv[1].count, kv[1].last))
            return tok, child, None
        q = self._count_law(kids)  # [V]
        tok = int(torch.multinomial(q, 1, generator=generator))
        return tok, kids[tok], q

    def _count_law(self, kids: dict[int, _Node]) -> torch.Tensor:
        ids = torch.tensor(list(kids), dtype=torch.long)
        counts = torch.tensor([c.count for c in kids.values()], dtype=torch.float32)
        q = torch.zeros(int(self.vocab_size or 0), dtype=torch.float32)
        return q.index_put_((ids,), counts / counts.sum())  # [V]

    @property
    def deterministic(self) -> bool:
        return not (self.sample and not self.params.is_greedy)

    def fork(self) -> SuffixDrafter:
        """A twin that shares the session memory (the trie) and opens its own document at its
        next proposal. Rows of a batch therefore see each other's text: each row stays exact
        (a proposal depends only on text fixed before the row's verification draws), but a
        row no longer equals a serial run that saw only its own."""
        twin = copy.copy(self)
        twin._live = None
        return twin

    def stats(self) -> SuffixStats:
        return self.trie.stats()
