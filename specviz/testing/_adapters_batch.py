"""Adapters for the batch-first chain kernels (FlashInfer, TensorRT-LLM) and SGLang's tree kernel.

* ``"flashinfer"``: ``flashinfer.sampling.chain_speculative_sampling(draft_probs [B, K, V],
  draft_token_ids [B, K], target_probs [B, K+1, V], maybe_output_accepted_token_num=None,
  maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None, seed=None,
  offset=None) -> (output_token_ids [B, K+1] (-1 padded), accepted_num [B], emitted_num [B])``.
  ``emitted_num`` must equal the emitted drafts; ``accepted_num`` counts positions accepted
  "independently", without the stop at the first rejection, so it must be >= ``emitted_num``.
* ``"trtllm"``: TensorRT-LLM ``tensorrt_llm/_torch/speculative/one_model_sampler.py::
  rejection_sampling_one_model(draft_probs, draft_token_ids, target_probs, deterministic=True,
  seed=None, offset=None) -> (accepted_tokens [B, K+1] (-1 padded), num_emitted [B])`` with
  ``num_emitted`` = emitted drafts + 1 (it delegates to FlashInfer). The kit passes an integer
  seed and advances ``offset`` by the draws of each call, as the docs ask of callers.
* ``"sglang_tree"``: ``sgl_kernel.tree_speculative_sampling_target_only(predicts [bs*N],
  accept_index [bs, S], accept_token_num [bs], candidates [bs, N], retrive_index [bs, N],
  retrive_next_token [bs, N], retrive_next_sibling [bs, N], uniform_samples [bs, N],
  uniform_samples_for_final_sampling [bs], target_probs [bs, N, V], draft_probs [bs, N, V],
  threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None`` (outputs in place;
  node 0 the last verified token, ``target_probs[b, i]`` the law after node i, q ignored:
  target-only). The kit owns the uniforms: it passes scrambled Sobol points (quasi-Monte-Carlo:
  the counts scatter less than multinomial ones, so the chi-square tests are conservative)
  and, on extra rows kept out of the statistics, coins of exactly 0 -- the boundary value
  ``torch.rand`` can return, where ``coin <= prob_acc`` accepts a token the target gives
  probability 0 (SGLang #35771): any impossible token there is an exact failure.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ._adapters import Adapter, Rows, _as_int_tensor, _f32, chain_emitted, parse_padded

__all__ = ["FlashInferAdapter", "SglangTreeAdapter", "TrtllmAdapter"]


def _batch_chain(rows: Rows, device):
    """[B, K, V] draft probs, [B, K] int32 ids, [B, K+1, V] target probs (one K per call)."""
    ks = {c.k for c in rows.cases}
    if len(ks) != 1:
        raise ValueError("batch-first chain kernels take one draft length per call")
    draft = _f32(np.stack([c.q_draft for c in rows.cases]), device)
    target = _f32(np.stack([c.p_target for c in rows.cases]), device)
    ids = torch.as_tensor(np.stack(rows.drafts), dtype=torch.int32, device=device)
    return draft, ids, target


def _counts(x, what: str, B: int) -> list[int]:
    return _as_int_tensor(x, what, (B,)).tolist()


class FlashInferAdapter(Adapter):
    name = "flashinfer"
    expects = (
        "chain_speculative_sampling(draft_probs [B, K, V], draft_token_ids [B, K], target_probs "
        "[B, K+1, V], ..., generator=None) -> (output_token_ids [B, K+1], accepted_num [B], "
        "emitted_num [B])"
    )
    positional = ("draft_probs", "draft_token_ids", "target_probs")
    problem = "emitted_num differs from the emitted drafts, or accepted_num < emitted_num,"

    def streams(self, rows, seed, device):
        return torch.Generator(device=device).manual_seed(seed)  # one generator for the batch

    def call(self, fn, rows, streams, device, rng):
        draft, ids, target = _batch_chain(rows, device)
        B, K = ids.shape
        kw = {"generator": streams} if self.accepts(fn, "generator") else {}
        res = fn(draft, ids, target, **kw)
        if not isinstance(res, tuple) or len(res) != 3:
            raise TypeError(f"a 'flashinfer' sampler must return (output_token_ids [B, K+1], accepted_num [B], emitted_num [B]), got {type(res).__name__}")  # fmt: skip
        out = _as_int_tensor(res[0], "output_token_ids", (B, K + 1))
        tokens = parse_padded(out, [K] * B, rows.cases[0].vocab, "output_token_ids")
        accepted = _counts(res[1], "accepted_num", B)
        emitted = _counts(res[2], "emitted_num", B)
        bad = sum(
            e != len(t) - 1 or a < e for t, a, e in zip(tokens, accepted, emitted, strict=True)
        )
        return [chain_emitted(t) for t in tokens], bad


class TrtllmAdapter(Adapter):
    name = "trtllm"
    expects = (
        "rejection_sampling_one_model(draft_probs [B, K, V], draft_token_ids [B, K], target_probs "
        "[B, K+1, V], deterministic=True, seed=None, offset=None) -> (accepted_tokens [B, K+1], "
        "num_emitted [B])"
    )
    positional = ("draft_probs", "draft_token_ids", "target_probs")
    problem = "num_emitted differs from the emitted tokens"

    def streams(self, rows, seed, device):
        return {"seed": int(seed), "offset": 0}

    def call(self, fn, rows, streams, device, rng):
        draft, ids, target = _batch_chain(rows, device)
        B, K = ids.shape
        kw = {}
        if self.accepts(fn, "seed") and self.accepts(fn, "offset"):
            kw = {"seed": streams["seed"], "offset": streams["offset"]}
            streams["offset"] += B * (K + 1)  # the draws of this call (FlashInfer's increment)
        res = fn(draft, ids, target, **kw)
        if not isinstance(res, tuple) or len(res) != 2:
            raise TypeError(f"a 'trtllm' sampler must return (accepted_tokens [B, K+1], num_emitted [B]), got {type(res).__name__}")  # fmt: skip
        out = _as_int_tensor(res[0], "accepted_tokens", (B, K + 1))
        tokens = parse_padded(out, [K] * B, rows.cases[0].vocab, "accepted_tokens")
        emitted = _counts(res[1], "num_emitted", B)
        bad = sum(e != len(t) for t, e in zip(tokens, emitted, strict=True))
        return [chain_emitted(t) for t in tokens], bad


# ------------------------------------------------------------------------------ sglang


def _topology(case, n_nodes: int):
    """(next_token, next_sibling) over the nodes 0..n (node 0 the root) of a chain or tree."""
    nxt = np.full(n_nodes, -1, dtype=np.int64)
    sib = np.full(n_nodes, -1, dtype=np.int64)
    parents = case.tree.parents if case.tree is not None else tuple(range(-1, case.k - 1))
    last_child: dict[int, int] = {}
    for i, par in enumerate(parents):
        node, parent = i + 1, par + 1  # node ids shifted by the root
        if parent in last_child:
            sib[last_child[parent]] = node
        else:
            nxt[parent] = node
        last_child[parent] = node
    return nxt, sib


class SglangTreeAdapter(Adapter):
    name = "sglang_tree"
    expects = (
        "tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, "
        "candidates, retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples, "
        "uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single=1.0, "
        "threshold_acc=1.0, deterministic=True) -> None (outputs in place)"
    )
    positional = (
        "predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
        "retrive_next_token", "retrive_next_sibling", "uniform_samples",
        "uniform_samples_for_final_sampling", "target_probs", "draft_probs",
    )  # fmt: skip
    trees = True
    problem = "a coin of exactly 0 accepted a token the target gives probability 0 (SGLang #35771)"
    boundary_every = 16  # one extra row with coins of exactly 0 per 16 rows

    def streams(self, rows, seed, device):
        from scipy.stats import qmc

        return {"seed": int(seed), "calls": 0, "qmc": qmc}

    def _uniforms(self, streams, n: int, dims: int) -> np.ndarray:
        # a fresh scramble per call: a stream's rounds must be independent
        streams["calls"] += 1
        rng = np.random.default_rng([streams["seed"], streams["calls"]])
        sobol = streams["qmc"].Sobol(dims, scramble=True, seed=rng)
        with warnings.catch_warnings():  # balance needs powers of 2; the scramble keeps it unbiased
            warnings.simplefilter("ignore")
            points = sobol.random(n)
        # shuffled over the rows: scrambles of one net keep its digit structure along the index
        # (point 2j and 2j+1 always fall in opposite halves), which would tie row i's draws in
        # one call to its draws in the next
        return points[rng.permutation(n)]

    def call(self, fn, rows, streams, device, rng):
        case0 = rows.cases[0]
        n_nodes = (len(case0.tree.parents) if case0.tree is not None else case0.k) + 1
        if any(c.p_target.shape[0] != n_nodes for c in rows.cases):
            raise ValueError("sglang_tree: one tree shape per call")
        B = len(rows.cases)
        u = self._uniforms(streams, B, n_nodes + 1)
        extra = B // self.boundary_every
        bound = list(range(B, B + extra))  # the boundary rows repeat the first cases, coins 0
        cases = list(rows.cases) + [rows.cases[i] for i in range(extra)]
        drafts = list(rows.drafts) + [rows.drafts[i] for i in range(extra)]
        u = np.concatenate([u, np.concatenate([np.zeros((extra, n_nodes)), u[:extra, -1:]], 1)])
        tokens = self._run(fn, cases, drafts, u, n_nodes, device)
        emitted = tokens[:B]
        impossible = sum(any(cases[b].p_target[ctx, t] == 0 for ctx, t in tokens[b]) for b in bound)
        return emitted, impossible

    def _run(self, fn, cases, drafts, u, n_nodes, device):
        bs, V = len(cases), cases[0].vocab
        depth = _depth(cases[0]) + 1
        nxt, sib = _topology(cases[0], n_nodes)
        cand = np.concatenate([np.zeros((bs, 1), dtype=np.int64), np.stack(drafts)], 1)
        ret = np.arange(bs * n_nodes).reshape(bs, n_nodes)
        i32 = dict(dtype=torch.int32, device=device)
        predicts = torch.zeros(bs * n_nodes, **i32)
        accept_index = torch.full((bs, depth), -1, **i32)
        accept_num = torch.zeros(bs, **i32)
        fn(
            predicts,
            accept_index,
            accept_num,
            torch.as_tensor(cand, dtype=torch.int64, device=device),
            torch.as_tensor(ret, dtype=torch.int64, device=device),
            torch.as_tensor(np.tile(nxt, (bs, 1)), dtype=torch.int64, device=device),
            torch.as_tensor(np.tile(sib, (bs, 1)), dtype=torch.int64, device=device),
            _f32(u[:, :n_nodes], device),
            _f32(u[:, n_nodes], device),
            _f32(np.stack([c.p_target for c in cases]), device),
            torch.zeros(bs, n_nodes, V, dtype=torch.float32, device=device),
        )
        num = _as_int_tensor(accept_num, "accept_token_num", (bs,)).tolist()
        idx = _as_int_tensor(accept_index, "accept_index", (bs, depth))
        pred = _as_int_tensor(predicts, "predicts", (bs * n_nodes,)).tolist()
        out = []
        for b in range(bs):
            if not 0 <= num[b] < depth:
                raise ValueError(f"accept_token_num[{b}] = {num[b]} outside [0, {depth - 1}]")
            slots = idx[b, : num[b] + 1].tolist()
            if any(not b * n_nodes <= s < (b + 1) * n_nodes for s in slots):
                raise ValueError(
                    f"accept_index[{b}] = {idx[b].tolist()} points outside row {b}'s slots"
                )
            nodes = [s - b * n_nodes for s in slots]
            toks = [pred[s] for s in slots]
            if any(not 0 <= t < V for t in toks):
                raise ValueError(f"predicts of row {b} hold a token id outside [0, V={V}): {toks}")
            out.append(list(zip(nodes, toks, strict=True)))
        return out


def _depth(case) -> int:
    if case.tree is None:
        return case.k
    depth = [0] * len(case.tree.parents)
    for i, par in enumerate(case.tree.parents):
        depth[i] = 1 if par < 0 else depth[par] + 1
    return max(depth)
