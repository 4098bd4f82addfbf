"""Batched model state: a physical-column KV cache with a validity mask.

Each row accepts its own number of drafts. Instead of re-aligning rows, the KV cache keeps
one physical column per fed token and a validity mask: rejected drafts (and the dummy slots of
rows that have less to feed) become *holes* that attention never sees, and every row's RoPE
positions count only its valid tokens. Rollback is clearing mask bits; :meth:`trim` crops
trailing columns that are holes in every row; :meth:`select` forks or drops rows.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from .threads import torch_threads

__all__ = ["BatchRunner", "ToyBatchRunner", "batch_runner", "batch_threads", "tree_ancestry"]

# A model call on at least this many tokens (rows x columns) runs at the thread count measured
# for batched calls (see batch_threads).
BATCH_THREAD_TOKENS = 32


def batch_threads(model: Any, tokens: int) -> int | None:
    """The torch thread count for one batched call of ``model`` on ``tokens`` tokens, or None
    (leave the current count).

    :func:`specviz.use_fastest_kernels` times batch-one shapes (a decode step, a gamma + 1
    verify pass) and sets the process's thread count to the faster: on 2 cores that is often
    one thread, because a 1-token matmul is too small to split. A call on
    ``BATCH_THREAD_TOKENS`` tokens or more multiplies matrices of that many rows, where more
    threads usually pay -- on a quiet host; on a busy one a second thread spin-waits for a
    descheduled partner (measured: 4x the CPU time for the same wall time). So the count for
    such calls is measured too, once per model and process: a decoder layer on a
    256-token batch, at the current count and at the largest count the kernel choice timed
    (never above the count in force when it measured), in 11 interleaved rounds (one choice
    holds for the whole process: with 5 rounds of 128 tokens a quiet host once chose one
    thread and ran a whole check on one core); more threads only when >= 20% faster. Thread
    counts change how oneDNN splits a matmul, so the logits (and a fixed seed's samples, in
    rare near-ties) may differ in the last bits between the two choices, as between packed
    and stock kernels.
    """
    if tokens < BATCH_THREAD_TOKENS:
        return None
    from .kernels import kernel_report  # lazy: kernels imports the runners

    report = kernel_report(model) or kernel_report()
    if report is None or not report.timings:
        return None
    now = torch.get_num_threads()
    cap = max(t.threads for t in report.timings)
    if cap <= now:
        return None
    layer = _first_layer(model)
    if layer is None:
        return None
    key = (now, cap)
    chosen = _BATCH_CHOICE.setdefault(layer, {})
    if key not in chosen:
        chosen[key] = _time_threads(model, layer, now, cap)
    n = chosen[key]
    return n if n != now else None


_BATCH_CHOICE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _first_layer(model: Any) -> Any:
    layers = getattr(getattr(model, "model", None), "layers", None)
    return layers[0] if layers is not None and len(layers) else None


def _time_threads(model: Any, layer: Any, now: int, cap: int, rounds: int = 11) -> int:
    """The faster of ``now`` and ``cap`` threads for ``layer``'s MLP on 256 tokens."""
    import time

    mlp = getattr(layer, "mlp", layer)
    hidden = int(getattr(model.config, "hidden_size", 0) or 0)
    if not hidden:
        return now
    p = next(model.parameters())
    x = torch.randn(1, 256, hidden, generator=torch.Generator().manual_seed(0)).to(p)
    seconds: dict[int, list[float]] = {now: [], cap: []}
    with torch.inference_mode():
        for _ in range(rounds):
            for n in (now, cap):
                with torch_threads(n):
                    mlp(x)  # warm the pool at this count
                    t0 = time.perf_counter()
                    mlp(x)
                    seconds[n].append(time.perf_counter() - t0)
    med = {n: sorted(v)[len(v) // 2] for n, v in seconds.items()}
    return cap if med[cap] * 1.2 < med[now] else now


_GQA_ENV = "TRANSFORMERS_SDPA_FORCE_GQA"


@contextlib.contextmanager
def _sdpa_gqa(device: torch.device, columns: int) -> Iterator[None]:
    """On CPU, let SDPA read grouped-query K/V heads in place (``enable_gqa``) instead of
    transformers' ``repeat_kv``, which copies every layer's whole cache n_rep times per call
    (SmolLM2: 3x; measured 6% of a consistency check's CPU time). transformers takes that path
    only without a mask, which the masked batch cache always has. Only for calls of several
    columns: there the CPU kernel gives the same bits either way (``tests/test_batch_gqa.py``
    compares the logits); a one-column call already avoids the copy (transformers packs the
    query heads instead), and switching it would change the logits in the last bits. Not on
    CUDA, where a mask with ``enable_gqa`` falls back to the math kernel."""
    if columns < 2 or device.type != "cpu" or os.environ.get(_GQA_ENV) is not None:
        yield
        return
    os.environ[_GQA_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(_GQA_ENV, None)


@contextlib.contextmanager
def _grouped_attention(device: torch.device, rows: int, cache: Any = None) -> Iterator[None]:
    """On CPU, batched calls (several rows) attend with :func:`grouped_attention` instead of
    SDPA: with the masked batch cache's boolean mask and short queries, PyTorch's CPU SDPA
    kernel spends its time on per-(row, head) overhead, not arithmetic (a 1,000-row verify
    pass of SmolLM2: 26 ms per layer against 10 ms in two matmuls, at 2 threads; in bfloat16
    18 against 4). One row keeps SDPA, so the serial engine's logits are untouched. The
    ``cache``'s shared-prompt layers (:class:`~specviz.core.shared_prefix.SharedPrefixLayer`)
    hand it their rows' own columns only, and it reads the prompt once for all rows."""
    if rows < 2 or device.type != "cpu":
        yield
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    shared = [lay for lay in getattr(cache, "layers", ()) if hasattr(lay, "prefix_keys")]
    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    before = local.get("sdpa")
    fallback = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = functools.partial(
        grouped_attention, fallback=fallback, layers=getattr(cache, "layers", None)
    )
    for lay in shared:
        lay.split = True
    try:
        yield
    finally:
        for lay in shared:
            lay.split = False
        if before is None:
            local.pop("sdpa", None)
        else:
            local["sdpa"] = before


def grouped_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, *, fallback, layers=None, **kwargs):  # fmt: skip
    """transformers' attention-function contract (query [B, Hq, q, D], key/value
    [B, Hkv, kv, D], a boolean mask [B, 1, q, kv]; returns [B, q, Hq, D], None) as two
    matmuls per key/value head: the Hq / Hkv query heads that share a key/value head are
    stacked into one [rep * q, D] block (repeat_kv's head order), so nothing is copied per
    head. Scores and softmax in float32; a masked score is the float32 minimum, not -inf,
    so a fully masked query (a hole's column) gets finite weights instead of NaN (its output
    is never read). No mask (transformers drops one without holes) means SDPA's causal
    rule. Anything else (a float mask, dropout, soft-capping, attention sinks, position
    bias, another device) goes to ``fallback``, transformers' SDPA.

    When ``layers[module.layer_idx]`` is a split shared-prompt layer, key/value are the rows'
    own columns and the prompt's [1, Hkv, P, D] block comes from the layer: its scores and
    its share of the output are one [B * rep * q, D] x [D, P] product per key/value head for
    all rows together."""
    idx = getattr(module, "layer_idx", None)
    layer = layers[idx] if layers is not None and idx is not None and idx < len(layers) else None
    prefix = layer if getattr(layer, "split", False) else None
    unusual = any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "sinks", "position_bias"))
    if attention_mask is None and query.device.type == "cpu":
        # transformers drops an all-visible mask (no holes): SDPA's own causal rule then
        attention_mask = _causal_mask(query, key, prefix, is_causal, module)
    if (
        attention_mask is None
        or attention_mask.dtype != torch.bool
        or attention_mask.shape[1] != 1
        or dropout
        or unusual
        or query.device.type != "cpu"
        or query.shape[1] % key.shape[1]
    ):
        if prefix is not None:
            key, value = prefix.whole(key, value)
        return fallback(module, query, key, value, attention_mask, dropout=dropout,
                        scaling=scaling, is_causal=is_causal, **kwargs)  # fmt: skip
    B, Hq, q, D = query.shape
    Hkv, kv = key.shape[1], key.shape[2]
    rep = Hq // Hkv
    scale = D**-0.5 if scaling is None else scaling
    grouped = query.reshape(B, Hkv, rep * q, D)  # query head j * rep + r -> kv head j
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # [B, Hkv, rep*q, kv]
    P = 0
    if prefix is not None:
        P = prefix.prefix_length
        by_head = grouped.transpose(0, 1).reshape(Hkv, B * rep * q, D)
        shared = torch.matmul(by_head, prefix.prefix_keys[0].transpose(-1, -2))  # [Hkv, B*rep*q, P]
        shared = shared.view(Hkv, B, rep * q, P).transpose(0, 1).float() * scale
        scores = torch.cat([shared, scores], dim=-1)  # [B, Hkv, rep*q, P + kv]
    full = P + kv
    mask = attention_mask.expand(B, 1, q, full).unsqueeze(2).expand(B, 1, rep, q, full)
    scores.masked_fill_(~mask.reshape(B, 1, rep * q, full), torch.finfo(torch.float32).min)
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(weights[..., P:], value)  # [B, Hkv, rep*q, D]
    if prefix is not None:
        w = weights[..., :P].transpose(0, 1).reshape(Hkv, B * rep * q, P)
        out += torch.matmul(w, prefix.prefix_values[0]).view(Hkv, B, rep * q, D).transpose(0, 1)
    out = out.view(B, Hq, q, D)  # [B, Hq, q, D]
    return out.transpose(1, 2).contiguous(), None


def _causal_mask(query, key, prefix, is_causal, module) -> torch.Tensor:
    """The boolean mask SDPA applies when transformers passes none ([1, 1, q, kv]): query i
    of q sees every key up to its own column (the last q columns are the queries); one
    query, or a module that is not causal, sees everything."""
    q = query.shape[2]
    full = key.shape[2] + (prefix.prefix_length if prefix is not None else 0)
    if q == 1 or is_causal is False or not getattr(module, "is_causal", True):
        return torch.ones(1, 1, q, full, dtype=torch.bool, device=query.device)
    cols = torch.arange(full, device=query.device)
    rows = torch.arange(full - q, full, device=query.device)
    return (cols[None, :] <= rows[:, None])[None, None]


class BatchRunner:
    """Physical-column KV cache with a validity mask, for a transformers causal LM."""

    def __init__(self, model: Any, batch: int) -> None:
        import inspect

        from transformers import DynamicCache

        self.model = model
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
        self._lazy: _LazyColumn | None = None  # a deferred last column (see extend)

    def extend(
        self,
        tokens: torch.Tensor,
        valid: torch.Tensor,
        num_logits: int,
        return_hidden: bool = False,
        defer_last: bool = False,
    ):
        """tokens, valid: [B, m] -> logits [B, num_logits, V] (float32); with
        ``return_hidden`` also the final normed hidden states of all m columns, [B, m, H].

        ``defer_last`` (a model whose logits are its output embedding, see
        :meth:`can_defer`): the last column's logits are left out ([B, num_logits - 1, V]) and
        computed later only for the rows that need them (:meth:`deferred_logits`) -- a verify
        pass needs its bonus law only where every draft was accepted. Without
        ``return_hidden`` (and on a cache of plain layers) the last column is not even fed:
        the model runs on it later, for those rows only (see :meth:`_defer_column`).

        Not under inference_mode itself: the mask must stay an ordinary tensor so rollback
        can clear bits in place."""
        tokens, valid = tokens.to(self.device), valid.to(self.device)
        before = self.mask.sum(1, keepdim=True)  # [B, 1] valid tokens so far
        positions = (before + valid.long().cumsum(1) - 1).clamp_min(0)  # [B, m]
        self._lazy = None
        if defer_last and not return_hidden and self._plain_layers():
            tokens, valid, positions = self._defer_column(tokens, valid, positions)
            num_logits -= 1
        self.mask = torch.cat([self.mask, valid], dim=1)
        threads = batch_threads(self.model, tokens.numel())
        with (
            torch.inference_mode(),
            torch_threads(threads),
            _sdpa_gqa(self.device, tokens.shape[1]),
            _grouped_attention(self.device, tokens.shape[0], self.cache),
        ):
            if self._lazy is not None:
                return self._forward(tokens, positions, num_logits)
            if defer_last:
                logits, hidden = self._forward_hidden(tokens, positions, num_logits, skip_last=True)
                self._deferred = hidden[:, -1].contiguous()  # [B, H]
                return (logits, hidden) if return_hidden else logits
            if return_hidden:
                return self._forward_hidden(tokens, positions, num_logits)
            return self._forward(tokens, positions, num_logits)

    def can_defer(self) -> bool:
        """Whether :meth:`extend` may defer its last column's logits (a plain output head)."""
        return self._plain_head()

    def deferred_logits(self, rows: torch.Tensor) -> torch.Tensor:
        """The deferred last column's logits of ``rows`` (indices into the last
        ``extend(defer_last=True)`` call's rows) -> [n, V] float32."""
        if self._lazy is not None:
            return self._lazy.logits(rows.to(self.device))
        h = self._deferred[rows.to(self.device)]
        with torch.inference_mode(), torch_threads(batch_threads(self.model, h.shape[0])):
            return self.model.get_output_embeddings()(h).float()

    def _plain_layers(self) -> bool:
        """Every cache layer is one whose columns :class:`_LazyColumn` can write."""
        from transformers.cache_utils import DynamicLayer

        return all(isinstance(lay, DynamicLayer) for lay in self.cache.layers)

    def _defer_column(self, tokens, valid, positions):
        """Keep the feed's last column aside ([B, 1] token and position) and return the
        others: with a weak draft only a few percent of rows accept every draft, and for the
        rest that column's pass through every layer (half of a gamma = 1 verify pass) is
        thrown away at rollback. :meth:`deferred_logits` runs it for the rows that keep it."""
        self._lazy = _LazyColumn(self, tokens[:, -1:], positions[:, -1:], valid[:, -1])
        return tokens[:, :-1], valid[:, :-1], positions[:, :-1]

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, num_logits: int):
        if tokens.shape[0] > 1 and num_logits < tokens.shape[1] and self._plain_head():
            # transformers slices the hidden states to the last num_logits columns, a
            # non-contiguous view for several rows, and F.linear on such a 3-D view takes a
            # path ~15x slower (SmolLM2's head: 7 vs 105 GFLOP/s): a draft step feeding two
            # tokens per row spent more time in its head than in its layers. Hand the head a
            # contiguous copy instead.
            return self._forward_hidden(tokens, positions, num_logits)[0]
        out = self.model(
            input_ids=tokens,
            attention_mask=self.mask.long(),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=num_logits,
            **{self._cache_kw: self.cache},
        )
        return out.logits[:, -num_logits:].float()

    def _forward_hidden(
        self, tokens: torch.Tensor, positions: torch.Tensor, num_logits: int, skip_last=False
    ):
        m = self.model
        base = m.get_decoder() if hasattr(m, "get_decoder") else m.model
        out = base(
            input_ids=tokens,
            attention_mask=self.mask.long(),
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: self.cache},
        )
        hidden = out.last_hidden_state  # [B, m, H]
        end = hidden.shape[1] - 1 if skip_last else hidden.shape[1]
        logits = m.get_output_embeddings()(
            hidden[:, end - num_logits + skip_last : end].contiguous()
        )
        return logits.float(), hidden

    def _plain_head(self) -> bool:
        """The model's logits are its output embedding of the final hidden states, nothing
        more (no soft-capping or scaling that only its own forward applies)."""
        cfg = self.model.config
        return (
            self.model.get_output_embeddings() is not None
            and getattr(cfg, "final_logit_softcapping", None) is None
            and getattr(cfg, "logit_scale", None) is None
            and type(self.model).__name__.endswith("ForCausalLM")
        )

    def extend_tree(
        self,
        tokens: torch.Tensor,
        valid: torch.Tensor,
        parents: torch.Tensor,
        return_hidden: bool = False,
    ):
        """Feed token trees, one per row, in one call: ``tokens``, ``valid``, ``parents``
        [B, m], where ``parents[b, j]`` is the index (within this feed) of node j's parent, or
        -1 for a node that follows the row's committed text. Each node attends to the row's
        valid cache and to its own ancestors only (a 4-D attention mask) and sits at position
        (valid tokens so far + its depth - 1). Returns logits [B, m, V] (row j: the law after
        node j) and, with ``return_hidden``, hidden states [B, m, H]. The new columns stay
        valid until :meth:`keep_columns` turns the unaccepted ones into holes."""
        tokens, valid, parents = (x.to(self.device) for x in (tokens, valid, parents))
        B, m = tokens.shape
        anc, depth = tree_ancestry(parents)  # [B, m, m] ancestor-or-self, [B, m]
        anc = anc & valid[:, None, :] & valid[:, :, None]
        before = self.mask.sum(1, keepdim=True)  # [B, 1]
        positions = (before + depth - 1).clamp_min(0)
        past = self.mask[:, None, :].expand(B, m, -1)  # [B, m, L]
        mask4 = torch.cat([past, anc], dim=2)[:, None]  # [B, 1, m, L + m], True = attend
        self.mask = torch.cat([self.mask, valid], dim=1)
        m_ = self.model
        with torch.inference_mode():
            if return_hidden:
                base = m_.get_decoder() if hasattr(m_, "get_decoder") else m_.model
                out = base(input_ids=tokens, attention_mask=mask4, position_ids=positions,
                           use_cache=True, **{self._cache_kw: self.cache})  # fmt: skip
                hidden = out.last_hidden_state
                return m_.get_output_embeddings()(hidden).float(), hidden
            out = m_(input_ids=tokens, attention_mask=mask4, position_ids=positions,
                     use_cache=True, **{self._cache_kw: self.cache})  # fmt: skip
            return out.logits.float()

    def keep_columns(self, start: int, keep: list[list[int]]) -> None:
        """After a tree pass that started at column ``start``: row b keeps the columns
        ``start + j`` for ``j`` in ``keep[b]``; the others become holes."""
        width = self.mask.shape[1] - start
        for b, cols in enumerate(keep):
            drop = torch.ones(width, dtype=torch.bool, device=self.device)
            if cols:
                drop[torch.tensor(cols, device=self.device)] = False
            self.mask[b, start:] &= ~drop
        self.trim()

    def prefill_shared(self, prompt: torch.Tensor, return_hidden: bool = False) -> Any:
        """Run the common prompt once (batch 1) and copy its KV cache to every row; with
        ``return_hidden`` return its hidden states, [1, m, H]."""
        batch = self.mask.shape[0]
        ids = prompt.view(1, -1).to(self.device)
        hidden = None
        with torch.inference_mode(), _sdpa_gqa(self.device, ids.shape[1]):
            if return_hidden:
                base = (
                    self.model.get_decoder()
                    if hasattr(self.model, "get_decoder")
                    else self.model.model
                )
                hidden = base(
                    input_ids=ids, use_cache=True, **{self._cache_kw: self.cache}
                ).last_hidden_state
            else:
                self.model(
                    input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_kw: self.cache}
                )
        from .shared_prefix import share_prefix

        share_prefix(self.cache, batch)  # the prompt's KV once, not once per row
        self.mask = torch.ones(batch, prompt.numel(), dtype=torch.bool, device=self.device)
        return hidden

    def trim(self) -> None:
        """Drop trailing columns that are holes in every row (cheap crop)."""
        alive = self.mask.any(0).nonzero()
        keep = int(alive[-1]) + 1 if alive.numel() else 0
        extra = self.mask.shape[1] - keep
        if extra:
            self.cache.crop(-extra)
            self.mask = self.mask[:, :keep]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these rows (finished rows leave the batch)."""
        self._lazy = None  # its row indices referred to the rows before
        self.cache.batch_select_indices(rows.to(self.device))
        self.mask = self.mask[rows.to(self.device)]


class _LazyColumn:
    """A verify pass's last column, fed later for the rows that keep it.

    The first :meth:`logits` call appends one physical column to the cache, a hole in every
    row; each call runs the model on the asked rows alone (their cache rows picked out, the
    column's token at its own position) and writes the new keys and values into that column,
    whose mask bit it sets. Rows that never ask keep the hole, as a rejected draft would."""

    def __init__(self, runner: BatchRunner, tokens, positions, valid) -> None:
        self.runner, self.tokens, self.positions, self.valid = runner, tokens, positions, valid
        self.appended = False  # the physical column exists (a hole in rows not yet run)
        self.done: dict[int, torch.Tensor] = {}  # row -> logits [V]

    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n] -> their column's logits [n, V] (float32)."""
        todo = sorted({int(r) for r in rows.tolist()} - self.done.keys())
        if todo:
            new = torch.tensor(todo, dtype=torch.long, device=rows.device)
            if not bool(self.valid[new].all()):
                raise AssertionError("a deferred column was asked for a row that did not feed it")
            self.done.update(zip(todo, self._run(new), strict=True))
        return torch.stack([self.done[int(r)] for r in rows.tolist()])

    def _run(self, rows: torch.Tensor) -> torch.Tensor:
        import copy

        r = self.runner
        sub = copy.copy(r.cache)  # the asked rows' cache, without the column if appended
        sub.layers = [copy.copy(lay) for lay in r.cache.layers]
        sub.batch_select_indices(rows)
        mask = r.mask[rows]
        if self.appended:
            sub.crop(-1)
            mask = mask[:, :-1]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        with (
            torch.inference_mode(),
            torch_threads(batch_threads(r.model, rows.numel())),
            _grouped_attention(r.device, rows.numel(), sub),
        ):
            out = r.model(
                input_ids=self.tokens[rows],
                attention_mask=mask.long(),
                position_ids=self.positions[rows],
                use_cache=True,
                logits_to_keep=1,
                **{r._cache_kw: sub},
            )
            for lay, new in zip(r.cache.layers, sub.layers, strict=True):
                if not self.appended:  # the column, a hole in every row
                    lay.keys = torch.cat([lay.keys, torch.zeros_like(lay.keys[:, :, :1])], -2)
                    lay.values = torch.cat([lay.values, torch.zeros_like(lay.values[:, :, :1])], -2)
                lay.keys[rows, :, -1] = new.keys[:, :, -1]
                lay.values[rows, :, -1] = new.values[:, :, -1]
        if not self.appended:  # the mask stays an ordinary tensor (see BatchRunner.extend)
            r.mask = torch.cat([r.mask, torch.zeros_like(r.mask[:, :1])], dim=1)
            self.appended = True
        r.mask[rows, -1] = True
        return out.logits[:, -1].float()


class ToyBatchRunner:
    """The same interface over a toy model (logits from each row's valid tokens)."""

    def __init__(self, model: Any, batch: int) -> None:
        self.model = model
        self.device = torch.device("cpu")
        self.tokens = torch.zeros(batch, 0, dtype=torch.long)
        self.mask = torch.zeros(batch, 0, dtype=torch.bool)

    def extend(
        self,
        tokens: torch.Tensor,
        valid: torch.Tensor,
        num_logits: int,
        return_hidden: bool = False,
    ) -> torch.Tensor:
        if return_hidden:
            raise TypeError(
                "toy models have no hidden states (feature-level drafters need a transformer)"
            )
        self.tokens = torch.cat([self.tokens, tokens.cpu()], 1)
        self.mask = torch.cat([self.mask, valid.cpu()], 1)
        L = self.tokens.shape[1]
        rows = []
        for b in range(self.tokens.shape[0]):
            out = []
            for col in range(L - num_logits, L):
                ctx = tuple(self.tokens[b, : col + 1][self.mask[b, : col + 1]].tolist())
                # a hole before any valid token (a 1-token prompt beside longer ones):
                # its logits are never used
                out.append(self.model.next_logits(ctx) if ctx else self._blank())
            rows.append(torch.stack(out))
        return torch.stack(rows)  # [B, num_logits, V]

    def extend_tree(
        self,
        tokens: torch.Tensor,
        valid: torch.Tensor,
        parents: torch.Tensor,
        return_hidden: bool = False,
    ) -> torch.Tensor:
        """See :meth:`BatchRunner.extend_tree`: each node's logits from the row's valid text
        plus the node's own ancestors."""
        if return_hidden:
            raise TypeError(
                "toy models have no hidden states (feature-level drafters need a transformer)"
            )
        B, m = tokens.shape
        out = torch.zeros(B, m, self.model.vocab_size)
        for b in range(B):
            base = self.tokens[b][self.mask[b]].tolist()
            par = parents[b].tolist()
            for j in range(m):
                if not bool(valid[b, j]):
                    continue
                path, node = [], j
                while node >= 0:
                    path.append(int(tokens[b, node]))
                    node = par[node]
                out[b, j] = self.model.next_logits(tuple(base + path[::-1]))
        self.tokens = torch.cat([self.tokens, tokens.cpu()], 1)
        self.mask = torch.cat([self.mask, valid.cpu()], 1)
        return out

    def keep_columns(self, start: int, keep: list[list[int]]) -> None:
        width = self.mask.shape[1] - start
        for b, cols in enumerate(keep):
            drop = torch.ones(width, dtype=torch.bool)
            if cols:
                drop[torch.tensor(cols)] = False
            self.mask[b, start:] &= ~drop

    def can_defer(self) -> bool:
        return False

    def prefill_shared(self, prompt: torch.Tensor, return_hidden: bool = False) -> None:
        if return_hidden:
            raise TypeError(
                "toy models have no hidden states (feature-level drafters need a transformer)"
            )
        batch = self.mask.shape[0]
        self.tokens = prompt.view(1, -1).expand(batch, -1).clone()
        self.mask = torch.ones(batch, prompt.numel(), dtype=torch.bool)

    def trim(self) -> None:
        pass

    def select(self, rows: torch.Tensor) -> None:
        self.tokens, self.mask = self.tokens[rows], self.mask[rows]

    def _blank(self) -> torch.Tensor:
        return torch.zeros(self.model.vocab_size)


def tree_ancestry(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """parents [B, m] (index within the feed, -1 = follows the committed text) ->
    (ancestor-or-self matrix [B, m, m]: ``anc[b, i, j]`` is True when node j is node i or one
    of its ancestors; depth [B, m]: 1 for a node whose parent is -1, its parent's + 1 else)."""
    B, m = parents.shape
    dev = parents.device
    anc = torch.eye(m, dtype=torch.bool, device=dev).expand(B, m, m).clone()
    depth = torch.ones(B, m, dtype=torch.long, device=dev)
    par = parents.tolist()
    for b in range(B):
        for i in range(m):
            p = par[b][i]
            if p >= 0:  # parents come before their children: their rows are complete
                anc[b, i] |= anc[b, p]
                depth[b, i] = depth[b, p] + 1
    return anc, depth


def batch_runner(model: Any, batch: int) -> BatchRunner | ToyBatchRunner:
    if hasattr(model, "make_runner"):  # toy models
        return ToyBatchRunner(model, batch)
    return BatchRunner(model, batch)
