"""Signature adapters: how the kit calls someone else's rejection sampler and reads its answer.

Each adapter turns one call's rows (an exact case and the drafts the kit drew from its q, per
row) into the arguments of the upstream function it mirrors, calls the function, checks the
output's shape, dtype and ids, and returns, per row, the emitted tokens each tagged with the
index of the target row whose law it must follow. The pure-PyTorch implementations written to
each signature are in :mod:`specviz.testing.reference`.

Upstream functions mirrored (signatures read from their sources, 2026):

* ``"transformers"``: ``transformers.generation.utils._speculative_sampling(candidate_input_ids
  [1, L+K], candidate_logits [1, K, V], candidate_length, new_logits [1, K+1, V], ...) ->
  (valid_tokens [1, n+1], n_matches)``; batch 1, logits in (the kit passes log p and log q),
  the global torch RNG (seeded inside ``torch.random.fork_rng``).
* ``"vllm"``: vLLM v1 ``vllm/v1/sample/rejection_sampler.py::rejection_sample(draft_token_ids
  [N], num_draft_tokens [B], max_spec_len, cu_num_draft_tokens [B], draft_probs [N, V] | None,
  target_probs [N, V], bonus_token_ids [B, 1], sampling_metadata) -> [B, max_spec_len + 1]``,
  flat ragged rows, -1 padding, bonus tokens drawn by the caller, per-request generators in
  ``sampling_metadata.generators``.
* ``"flashinfer"``, ``"trtllm"``, ``"sglang_tree"``: :mod:`specviz.testing._adapters_batch`.
* ``"specviz"``: specviz's verifier contract, ``verify(tokens [k], q_draft [k, V] | None,
  p_target [k+1, V], generator) -> Verdict`` (a name of the registry or a
  :class:`~specviz.verification.base.VerifierSpec` also works; a spec's ``verify_rows`` gets
  the whole batch, its ``verify_tree`` the tree family).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ._cases import Case

__all__ = ["Adapter", "Emitted", "Rows"]

#: Per row: [(target row index, token), ...] in emission order.
Emitted = list[list[tuple[int, int]]]


@dataclass
class Rows:
    """One call: per row its case and the draft tokens the kit drew (chains: [k_i]; trees: [n])."""

    cases: list[Case]
    drafts: list[np.ndarray]


class Adapter:
    """Calls one signature. Subclasses set ``name``, ``expects`` (the call, for error messages)
    and implement :meth:`call`."""

    name = ""
    expects = ""
    mixed_lengths = False  # rows of different chain lengths in one call
    trees = False
    problem = "the sampler's own counts disagree with its tokens"  # what call() counts as bad

    def check_callable(self, fn: Any) -> Any:
        """The function to call; a TypeError naming the signature when it cannot take the call."""
        if not callable(fn):
            raise TypeError(f"fn must be callable with the {self.name!r} signature {self.expects}, got {type(fn).__name__}")  # fmt: skip
        self._bind(fn, self.positional, {})
        return fn

    positional: tuple[str, ...] = ()

    def _bind(self, fn, names, kwargs) -> None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and C extensions: nothing to check up front
            return
        try:
            sig.bind(*names, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"fn{sig} cannot be called with the {self.name!r} signature {self.expects}: {exc}"
            ) from None

    def accepts(self, fn: Any, keyword: str) -> bool:
        """Whether ``fn`` takes the optional argument ``keyword``."""
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return True
        return keyword in params or any(p.kind == p.VAR_KEYWORD for p in params.values())

    def streams(self, rows: int, seed: int, device: torch.device) -> Any:
        """Per-row random state threaded through successive calls (one stream per row)."""
        return [
            torch.Generator(device=device).manual_seed(seed * 1_000_003 + i) for i in range(rows)
        ]

    def call(self, fn, rows: Rows, streams: Any, device: torch.device, rng: np.random.Generator) -> tuple[Emitted, int]:  # fmt: skip
        """-> (emitted per row, number of rows whose own counters disagree with the tokens)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------ checks


def _as_int_tensor(out: Any, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"{what} must be a torch.Tensor of shape {list(shape)}, got {type(out).__name__}"
        )
    if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        raise TypeError(
            f"{what} must hold integer token ids (shape {list(shape)}), got dtype {out.dtype}"
        )
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{what} must have shape {list(shape)}, got {list(out.shape)}")
    return out.detach().cpu().long()


def _check_ids(tokens: list[int], vocab: int, what: str) -> None:
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"{what} holds token id {bad[0]}, outside [0, V={vocab})")


def parse_padded(out: torch.Tensor, ks: list[int], vocab: int, what: str) -> list[list[int]]:
    """Rows of emitted ids followed by -1 padding: each row 1..k_i+1 ids, ids in [0, V)."""
    valid = out != -1
    n = valid.int().cumprod(1).sum(1)  # [B] ids before the first -1
    ks_t = torch.as_tensor(ks)
    bad = (valid.sum(1) != n) | (n < 1) | (n > ks_t + 1)
    bad |= ((out < 0) | (out >= vocab)).logical_and(valid).any(1)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        row, m = out[b].tolist(), int(n[b])
        if int(valid[b].sum()) != m:
            raise ValueError(
                f"{what} row {b}: -1 padding must only follow the emitted tokens, got {row}"
            )
        if not 1 <= m <= ks[b] + 1:
            raise ValueError(f"{what} row {b}: {m} tokens emitted, expected 1..{ks[b] + 1} (k = {ks[b]} drafts), got {row}")  # fmt: skip
        _check_ids(row[:m], vocab, f"{what} row {b}")
    lengths = n.tolist()
    return [row[:m] for row, m in zip(out.tolist(), lengths, strict=True)]


def chain_emitted(tokens: list[int]) -> list[tuple[int, int]]:
    return [(j, t) for j, t in enumerate(tokens)]


def _f32(x: np.ndarray, device) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32, device=device)


# ------------------------------------------------------------------------------ specviz


class SpecvizAdapter(Adapter):
    name = "specviz"
    expects = "verify(tokens [k], q_draft [k, V] | None, p_target [k+1, V], generator) -> Verdict"
    positional = ("tokens", "q_draft", "p_target", "generator")
    mixed_lengths = True
    trees = True

    def check_callable(self, fn: Any) -> Any:
        from ..verification.base import VerifierSpec, get_verifier

        if isinstance(fn, str):
            fn = get_verifier(fn, greedy=False)
        if isinstance(fn, VerifierSpec):
            return fn
        super().check_callable(fn)
        return VerifierSpec(getattr(fn, "__name__", "sampler"), fn, False, "user verifier")

    def call(self, spec, rows, streams, device, rng):
        cache: dict[int, tuple] = {}
        args = []
        for case, drafts in zip(rows.cases, rows.drafts, strict=True):
            if id(case) not in cache:
                q = None if case.deterministic else _f32(case.q_draft, device)
                cache[id(case)] = (_f32(case.p_target, device), q)
            p, q = cache[id(case)]
            args.append((torch.as_tensor(drafts, dtype=torch.long, device=device), q, p))
        if rows.cases[0].tree is not None:
            return self._trees(spec, rows, args, streams), 0
        if spec.verify_rows is not None:
            verdicts = spec.verify_rows(*[list(a) for a in zip(*args, strict=True)], list(streams))
            if len(verdicts) != len(args):
                raise ValueError(
                    f"verify_rows returned {len(verdicts)} verdicts for {len(args)} rows"
                )
        else:
            verdicts = [spec.verify(t, q, p, g) for (t, q, p), g in zip(args, streams, strict=True)]
        out = []
        for b, ((tokens, _, p), v) in enumerate(zip(args, verdicts, strict=True)):
            n, nxt = _verdict_fields(v, b, tokens.numel())
            emitted = tokens[:n].tolist() + [nxt]
            _check_ids(emitted, p.shape[-1], f"verdict of row {b}")
            out.append(chain_emitted(emitted))
        return out, 0

    def _trees(self, spec, rows, args, streams) -> Emitted:
        from ..drafting.base import TreeDraft

        if spec.verify_tree is None:
            raise ValueError(
                f"verifier {spec.name!r} checks chains only: leave out the 'tree' family"
            )
        out = []
        for b, ((tokens, q, p), g) in enumerate(zip(args, streams, strict=True)):
            shape = rows.cases[b].tree
            tree = TreeDraft(tokens, torch.tensor(shape.parents), q, shape.sampling)
            v = spec.verify_tree(tree, p, g)
            path, nxt = list(v.path), int(v.next_token)
            contexts = [0] + [i + 1 for i in path]
            emitted = [int(tokens[i]) for i in path] + [nxt]
            _check_ids(emitted, p.shape[-1], f"tree verdict of row {b}")
            out.append(list(zip(contexts, emitted, strict=True)))
        return out


def _verdict_fields(v: Any, b: int, k: int) -> tuple[int, int]:
    try:
        n, nxt = v.num_accepted, v.next_token
    except AttributeError:
        raise TypeError(
            f"a 'specviz' verifier must return a Verdict (with num_accepted and next_token); row {b} "
            f"got {type(v).__name__}"
        ) from None
    n, nxt = int(n), int(nxt)
    if not 0 <= n <= k:
        raise ValueError(f"verdict of row {b}: num_accepted = {n} outside [0, k = {k}]")
    return n, nxt


# ------------------------------------------------------------------------------ transformers


class TransformersAdapter(Adapter):
    name = "transformers"
    expects = (
        "_speculative_sampling(candidate_input_ids [1, L+K], candidate_logits [1, K, V], "
        "candidate_length, new_logits [1, K+1, V]) -> (valid_tokens [1, n+1], n_matches)"
    )
    positional = ("candidate_input_ids", "candidate_logits", "candidate_length", "new_logits")
    problem = "n_matches disagrees with valid_tokens"

    def streams(self, rows, seed, device):
        return SimpleNamespace(seed=seed)  # the global RNG, seeded once inside fork_rng

    def call(self, fn, rows, streams, device, rng):
        cache: dict[int, tuple] = {}
        out, bad = [], 0
        prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(streams.seed)
            streams.seed += 1  # the next call continues with a different stream
            for b, (case, drafts) in enumerate(zip(rows.cases, rows.drafts, strict=True)):
                if id(case) not in cache:
                    with np.errstate(divide="ignore"):
                        cache[id(case)] = (
                            _f32(np.log(case.q_draft), device)[None],  # [1, K, V]
                            _f32(np.log(case.p_target), device)[None],  # [1, K+1, V]
                        )
                q_logits, p_logits = cache[id(case)]
                k = case.k
                ids = torch.cat([prompt, torch.as_tensor(drafts, device=device).view(1, k)], 1)
                res = fn(ids, q_logits, k, p_logits)
                tokens, n = self._parse(res, b, k, case.vocab)
                bad += n != len(tokens) - 1
                out.append(chain_emitted(tokens))
        return out, bad

    def _parse(self, res, b, k, vocab) -> tuple[list[int], int]:
        if not isinstance(res, tuple) or len(res) != 2:
            raise TypeError(f"a 'transformers' sampler must return (valid_tokens [1, n+1], n_matches); row {b} got {type(res).__name__}")  # fmt: skip
        valid, n = res
        if not isinstance(valid, torch.Tensor) or valid.dim() != 2 or valid.shape[0] != 1 or not 1 <= valid.shape[1] <= k + 1:  # fmt: skip
            shape = list(valid.shape) if isinstance(valid, torch.Tensor) else type(valid).__name__
            raise ValueError(
                f"valid_tokens must have shape [1, n+1] with n+1 in 1..{k + 1}; row {b} got {shape}"
            )
        valid = _as_int_tensor(valid, "valid_tokens", tuple(valid.shape))
        tokens = valid[0].tolist()
        _check_ids(tokens, vocab, f"valid_tokens of row {b}")
        return tokens, int(n)


# ------------------------------------------------------------------------------ vllm


class VllmAdapter(Adapter):
    name = "vllm"
    expects = (
        "rejection_sample(draft_token_ids [N], num_draft_tokens [B], max_spec_len, "
        "cu_num_draft_tokens [B], draft_probs [N, V] | None, target_probs [N, V], "
        "bonus_token_ids [B, 1], sampling_metadata) -> [B, max_spec_len + 1] (-1 padded)"
    )
    positional = (
        "draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens",
        "draft_probs", "target_probs", "bonus_token_ids", "sampling_metadata",
    )  # fmt: skip
    mixed_lengths = True

    def call(self, fn, rows, streams, device, rng):
        ks = [c.k for c in rows.cases]
        B, V = len(ks), rows.cases[0].vocab
        draft_ids = torch.as_tensor(np.concatenate(rows.drafts), dtype=torch.int32, device=device)
        target = _f32(np.concatenate([c.p_target[: c.k] for c in rows.cases]), device)
        det = all(c.deterministic for c in rows.cases)
        draft = None if det else _f32(np.concatenate([c.q_draft for c in rows.cases]), device)
        bonus = [rng.choice(V, p=c.p_target[c.k]) for c in rows.cases]  # the caller samples it
        meta = SimpleNamespace(
            all_greedy=False,
            all_random=True,
            temperature=torch.ones(B, dtype=torch.float32, device=device),
            top_k=None,
            top_p=None,
            generators={i: g for i, g in enumerate(streams)},
            max_num_logprobs=None,
        )
        out = fn(
            draft_ids,
            ks,
            max(ks),
            torch.as_tensor(np.cumsum(ks), dtype=torch.int32, device=device),
            draft,
            target,
            torch.as_tensor(bonus, dtype=torch.int32, device=device).view(B, 1),
            meta,
        )
        out = _as_int_tensor(out, "the output of rejection_sample", (B, max(ks) + 1))
        tokens = parse_padded(out, ks, V, "rejection_sample output")
        # a bonus token only where every draft was kept; the law is checked at that position
        return [chain_emitted(t) for t in tokens], 0
