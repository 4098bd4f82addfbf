"""Pure-PyTorch rejection samplers written to each engine's signature: one correct, and broken
ones that reproduce mistakes engines shipped.

They exist so that every signature adapter of the kit is tested both ways on a CPU (the real
vLLM, FlashInfer, TensorRT-LLM and SGLang kernels need CUDA; ``benchmarks/conformance_gpu.py``
runs them where a GPU is), and as a readable statement of what each upstream function must do.
Written from the published signatures and the papers, not from the engines' code.

>>> import torch
>>> from specviz.testing.reference import flashinfer_chain_speculative_sampling
>>> draft = torch.tensor([[[0.5, 0.5]]]); target = torch.tensor([[[0.5, 0.5], [1.0, 0.0]]])
>>> out, accepted, emitted = flashinfer_chain_speculative_sampling(draft, torch.tensor([[1]]), target)
>>> out.tolist()  # q = p: the draft is kept, then the bonus token (target row 1 is a point mass)
[[1, 0]]
"""

from __future__ import annotations

from typing import Any

import torch

from ..verification.shipped import permuted_row_offsets

__all__ = [
    "flashinfer_chain_speculative_sampling",
    "flashinfer_trace_reference",
    "sglang_inclusive_coin",
    "sglang_stale_draft_probs",
    "sglang_tree_target_only",
    "transformers_softmax_residual",
    "transformers_speculative_sampling",
    "trtllm_one_position_late",
    "trtllm_rejection_sampling_one_model",
    "vllm_ragged_row_permutation",
    "vllm_rejection_sample",
]


def _norm(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-30), fallback)


def _first_rejection(accept: torch.Tensor) -> torch.Tensor:
    """[..., k] bool -> [...] number of leading Trues."""
    return accept.int().cumprod(-1).sum(-1)


def _inverse_cdf(law: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """law [..., V], u [...] -> the first token whose CDF exceeds u * total."""
    cdf = law.double().cumsum(-1)
    idx = torch.searchsorted(cdf, (u.double() * cdf[..., -1]).unsqueeze(-1), right=True)
    return idx.squeeze(-1).clamp(max=law.shape[-1] - 1)


# -- transformers: _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits)


def _transformers_style(
    candidate_input_ids, candidate_logits, candidate_length, new_logits, residual
):
    k = int(candidate_length)
    drafts = candidate_input_ids[0, -k:]
    q = candidate_logits[0].softmax(-1)  # [k, V]
    p = new_logits[0].softmax(-1)  # [k+1, V]
    idx = torch.arange(k)
    ratio = p[idx, drafts] / q[idx, drafts]
    u = torch.rand(k, device=p.device)  # the global RNG, as upstream
    n = int(_first_rejection(u < ratio))
    law = p[k] if n == k else residual(p[n], q[n])
    t = torch.multinomial(law, 1)
    return torch.cat([drafts[:n], t])[None], n


def transformers_speculative_sampling(
    candidate_input_ids, candidate_logits, candidate_length, new_logits
):
    """Correct (Leviathan et al. Alg. 1): accept while u < p/q, then norm(max(0, p - q)) or the bonus."""
    return _transformers_style(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                               lambda p, q: _norm(torch.clamp(p - q, min=0.0), p))  # fmt: skip


def transformers_softmax_residual(
    candidate_input_ids, candidate_logits, candidate_length, new_logits
):
    """Broken: softmax of the residual instead of its normalisation (transformers PR #28508)."""
    return _transformers_style(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                               lambda p, q: torch.clamp(p - q, min=0.0).softmax(-1))  # fmt: skip


# -- vLLM v1: rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, ...)


def _vllm(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
          target_probs, bonus_token_ids, sampling_metadata, starts) -> torch.Tensor:  # fmt: skip
    B, dev = len(num_draft_tokens), target_probs.device
    out = torch.full((B, max_spec_len + 1), -1, dtype=torch.int32, device=dev)
    gens = getattr(sampling_metadata, "generators", {}) or {}
    for b, k in enumerate(num_draft_tokens):
        s, g = starts[b], gens.get(b)
        tok = draft_token_ids[s : s + k].long()
        p = target_probs[s : s + k]
        idx = torch.arange(k, device=dev)
        q_x = torch.ones(k, device=dev) if draft_probs is None else draft_probs[s : s + k][idx, tok]
        u = torch.rand(k, generator=g, device=dev)
        n = int(_first_rejection(u < p[idx, tok] / q_x))
        out[b, :n] = tok[:n].int()
        if n == k:
            out[b, k] = bonus_token_ids[b, 0]
            continue
        q = draft_probs[s + n] if draft_probs is not None else torch.nn.functional.one_hot(tok[n], p.shape[-1]).to(p)  # fmt: skip
        r = _norm(torch.clamp(p[n] - q, min=0.0), p[n])
        e = torch.empty_like(r).exponential_(generator=g)  # exponential race = one draw from r
        out[b, n] = int(torch.where(r > 0, r / e, -1.0).argmax())
    return out


def vllm_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                          draft_probs, target_probs, bonus_token_ids, sampling_metadata):  # fmt: skip
    """Correct: each request's slice of the flat buffers, its own generator if seeded."""
    ks = list(num_draft_tokens)
    starts = [int(c) - k for c, k in zip(cu_num_draft_tokens.tolist(), ks, strict=True)]
    return _vllm(draft_token_ids, ks, max_spec_len, cu_num_draft_tokens, draft_probs,
                 target_probs, bonus_token_ids, sampling_metadata, starts)  # fmt: skip


def vllm_ragged_row_permutation(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                                draft_probs, target_probs, bonus_token_ids, sampling_metadata):  # fmt: skip
    """Broken: slices found through a row map sorted by length (vLLM #14645) -- right when every
    request drafts as many tokens, rows leak into each other when the lengths differ."""
    ks = list(num_draft_tokens)
    return _vllm(draft_token_ids, ks, max_spec_len, cu_num_draft_tokens, draft_probs,
                 target_probs, bonus_token_ids, sampling_metadata, permuted_row_offsets(ks))  # fmt: skip


# -- FlashInfer: chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, ...)


def _generator(generator, seed, offset, device) -> torch.Generator | None:
    if generator is not None:
        return generator
    if seed is None:
        return None
    return torch.Generator(device=device).manual_seed(
        (int(seed) * 1_000_003 + int(offset or 0)) % 2**63
    )


def _flashinfer(draft_probs, draft_token_ids, target_probs, gen, late: bool = False):
    B, K, V = draft_probs.shape
    ids = draft_token_ids.long()
    u = torch.rand(B, K + 1, generator=gen, device=draft_probs.device)  # K coins + the final draw
    q_x = draft_probs.gather(2, ids[..., None])[..., 0]
    p_x = target_probs[:, :K].gather(2, ids[..., None])[..., 0]
    accept = u[:, :K] * q_x < p_x  # u < p/q without dividing by q
    n = _first_rejection(accept)  # [B]
    rows = torch.arange(B, device=draft_probs.device)
    at = n.clamp(max=K - 1)
    residual = _norm(torch.clamp(target_probs[rows, at] - draft_probs[rows, at], min=0.0), target_probs[rows, at])  # fmt: skip
    if late:  # the law after the rejected draft, one position late
        residual = target_probs[rows, (n + 1).clamp(max=K)]
    law = torch.where((n == K)[:, None], target_probs[rows, K], residual)
    final = _inverse_cdf(law, u[:, K])
    out = torch.where(torch.arange(K + 1, device=ids.device)[None] < n[:, None], torch.cat([ids, ids[:, :1]], 1), -1)  # fmt: skip
    out[rows, n] = final
    return out.int(), accept.sum(1).int(), n.int()


def flashinfer_chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
                                          maybe_output_accepted_token_num=None,
                                          maybe_output_emitted_draft_token_num=None,
                                          deterministic=True, generator=None, seed=None, offset=None):  # fmt: skip
    """Correct: (output_token_ids [B, K+1] -1 padded, accepted_num [B] counted without the stop
    at the first rejection, emitted_num [B])."""
    gen = _generator(generator, seed, offset, draft_probs.device)
    return _flashinfer(draft_probs, draft_token_ids, target_probs, gen)


def flashinfer_trace_reference(
    draft_probs, draft_token_ids, target_probs, generator=None, **_: Any
):
    """Broken: a deterministic oracle -- keep x iff p(x) >= q(x), else the argmax of the
    residual, the bonus the argmax of the target (the shape of FlashInfer's trace reference,
    which agrees with the kernel only on one-hot inputs)."""
    B, K, _V = draft_probs.shape
    ids = draft_token_ids.long()
    q_x = draft_probs.gather(2, ids[..., None])[..., 0]
    p_x = target_probs[:, :K].gather(2, ids[..., None])[..., 0]
    accept = p_x >= q_x
    n = _first_rejection(accept)
    rows = torch.arange(B)
    at = n.clamp(max=K - 1)
    residual = torch.clamp(target_probs[rows, at] - draft_probs[rows, at], min=0.0)
    law = torch.where((n == K)[:, None], target_probs[rows, K], residual)
    out = torch.where(torch.arange(K + 1)[None] < n[:, None], torch.cat([ids, ids[:, :1]], 1), -1)
    out[rows, n] = law.argmax(-1)
    return out.int(), accept.sum(1).int(), n.int()


# -- TensorRT-LLM: rejection_sampling_one_model(draft_probs, draft_token_ids, target_probs, ...)


def trtllm_rejection_sampling_one_model(draft_probs, draft_token_ids, target_probs,
                                        deterministic=True, seed=None, offset=None):  # fmt: skip
    """Correct: (accepted_tokens [B, K+1] -1 padded, num_emitted [B] = emitted drafts + 1)."""
    gen = _generator(None, seed, offset, draft_probs.device)
    out, _, emitted = _flashinfer(draft_probs, draft_token_ids, target_probs, gen)
    return out, emitted + 1


def trtllm_one_position_late(draft_probs, draft_token_ids, target_probs, deterministic=True, seed=None, offset=None):  # fmt: skip
    """Broken: after a rejection at n the token comes from target row n+1 (OpenVINO #4190's
    mistake written to this signature)."""
    gen = _generator(None, seed, offset, draft_probs.device)
    out, _, emitted = _flashinfer(draft_probs, draft_token_ids, target_probs, gen, late=True)
    return out, emitted + 1


# -- SGLang: tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, ...)


def _sglang(predicts, accept_index, accept_token_num, candidates, retrive_index,
            retrive_next_token, retrive_next_sibling, uniform_samples,
            uniform_samples_for_final_sampling, target_probs, draft_probs,
            threshold_single=1.0, threshold_acc=1.0, inclusive=False) -> None:  # fmt: skip
    """One coin per level; the i-th child is kept when coin < (target mass of children 1..i) /
    threshold_acc; a rejected child's target mass is written into draft_probs, so the final
    token comes from max(0, target - draft_probs): the target without the tried children."""
    bs, depth = accept_index.shape
    cand, nxt, sib, ret = (x.tolist() for x in (candidates, retrive_next_token, retrive_next_sibling, retrive_index))  # fmt: skip
    coins, finals = uniform_samples.tolist(), uniform_samples_for_final_sampling.tolist()
    for b in range(bs):
        prob_acc, cur_prob, coin, cur = 0.0, 0, coins[b][0], 0
        last = ret[b][0]
        accept_index[b, 0] = last
        n = 0
        for _ in range(1, depth):
            child = nxt[b][cur]
            while child != -1:
                x = cand[b][child]
                p_x = float(target_probs[b, cur_prob, x])
                prob_acc += p_x
                bar = prob_acc / max(threshold_acc, 1e-9)
                if (coin <= bar if inclusive else coin < bar) or p_x >= threshold_single:
                    predicts[last] = x
                    n += 1
                    last = ret[b][child]
                    accept_index[b, n] = last
                    prob_acc, cur_prob, coin, cur = 0.0, child, coins[b][child], child
                    break
                draft_probs[b, cur_prob, x] = target_probs[b, cur_prob, x]
                child = sib[b][child]
            if child == -1:
                break
        accept_token_num[b] = n
        law = torch.clamp(target_probs[b, cur_prob] - draft_probs[b, cur_prob], min=0.0)
        predicts[last] = int(_inverse_cdf(law, torch.tensor(finals[b])))


def sglang_tree_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                            retrive_next_token, retrive_next_sibling, uniform_samples,
                            uniform_samples_for_final_sampling, target_probs, draft_probs,
                            threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:  # fmt: skip
    """Correct at thresholds 1 (strict coin < mass): lossless for candidates that do not
    depend on the coins."""
    _sglang(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            draft_probs, threshold_single, threshold_acc)  # fmt: skip


def sglang_inclusive_coin(predicts, accept_index, accept_token_num, candidates, retrive_index,
                          retrive_next_token, retrive_next_sibling, uniform_samples,
                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                          threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:  # fmt: skip
    """Broken: ``coin <= prob_acc`` -- a coin of exactly 0 keeps a candidate the target gives
    probability 0 (SGLang #35771)."""
    _sglang(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            draft_probs, threshold_single, threshold_acc, inclusive=True)  # fmt: skip


_SCRATCH: dict[tuple[int, ...], torch.Tensor] = {}


def sglang_stale_draft_probs(predicts, accept_index, accept_token_num, candidates, retrive_index,
                             retrive_next_token, retrive_next_sibling, uniform_samples,
                             uniform_samples_for_final_sampling, target_probs, draft_probs,
                             threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:  # fmt: skip
    """Broken: a draft-probability scratch kept between calls and never cleared, instead of
    the caller's zeros (the uninitialised buffer of SGLang #12512 / PR #12561): tokens tried
    in earlier calls lose their mass in the residual."""
    key = tuple(target_probs.shape)
    if key not in _SCRATCH:
        _SCRATCH[key] = torch.zeros_like(target_probs)
    _sglang(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            _SCRATCH[key], threshold_single, threshold_acc)  # fmt: skip
