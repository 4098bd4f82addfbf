"""Block verification (Sun et al. 2024, arXiv 2403.10444), right and wrong.

Token verification stops at the first rejected draft. Block verification looks at the joint
ratio of each prefix and may keep a prefix even though one of its tokens would have been
rejected on its own; it is lossless and accepts at least as many tokens in expectation
(their Theorems 1-2). With drafts x_1..x_k, target rows p_0..p_k and draft rows q_0..q_{k-1}
(row i is the law of the token after i accepted drafts):

    rho_0 = 1,  rho_i = min(1, rho_{i-1} p_{i-1}(x_i) / q_{i-1}(x_i))
    h_i   = Z_i / (Z_i + 1 - rho_i),  Z_i = sum_v max(rho_i p_i(v) - q_i(v), 0)   (i < k)
    h_k   = rho_k
    tau   = the largest i with eta_i <= h_i (eta_i ~ U(0, 1) independent), else 0
    emit x_1..x_tau, then a token from p_k (tau = k) or from
          norm(max(rho_tau p_tau - q_tau, 0))                                   (tau < k)

At k = 1 this is token verification. vllm-ascend shipped a block verifier whose acceptance was
cumprod(min(1, p/q)) >= cumprod(u) and whose recovered token came from the token-wise residual
(issue #7807, fixed by PR #7808); it is :func:`verify_block_cumprod`.
"""

from __future__ import annotations

import torch

from ..core.sampling import sample
from .lossless import _gathered
from .verdict import Verdict

__all__ = ["block_thresholds", "verify_block", "verify_block_cumprod"]


def _ratios(tokens, q_draft, p_target):
    q, p_x, q_x = _gathered(tokens, q_draft, p_target)
    p_x, q_x = p_x.double(), q_x.double()
    ratio = torch.where(q_x > 0, p_x / q_x.clamp_min(1e-300), torch.zeros_like(p_x))
    return q.double(), ratio


def block_thresholds(
    tokens: torch.Tensor, q_draft: torch.Tensor | None, p_target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rho [k+1] with rho_0 = 1, h [k]): the prefix ratios and acceptance thresholds above."""
    q, ratio = _ratios(tokens, q_draft, p_target)
    p = p_target.double()
    k = tokens.numel()
    rho = torch.ones(k + 1, dtype=torch.float64, device=p.device)
    for i in range(1, k + 1):
        rho[i] = torch.clamp(rho[i - 1] * ratio[i - 1], max=1.0)
    h = torch.empty(k, dtype=torch.float64, device=p.device)
    for i in range(1, k):
        z = torch.clamp(rho[i] * p[i] - q[i], min=0.0).sum()
        denom = z + 1.0 - rho[i]
        h[i - 1] = z / denom if float(denom) > 0.0 else 1.0
    if k:
        h[k - 1] = rho[k]
    return rho, h


def _emit(tokens, p_target, generator, tau, law, accept, u) -> Verdict:
    k = tokens.numel()
    if tau == k:
        return Verdict(k, int(sample(p_target[k], generator)), "bonus", accept, u, None)
    return Verdict(tau, int(sample(law, generator)), "corrected", accept, u, law)


def _norm_or(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = r.sum()
    return r / total if float(total) > 0.0 else fallback


def verify_block(tokens, q_draft, p_target, generator) -> Verdict:
    """Block verification (Sun et al. 2024, Algorithm 2): lossless. ``accept_prob`` holds the
    thresholds h_i, ``u`` the draws eta_i."""
    k = tokens.numel()
    q, _ = _ratios(tokens, q_draft, p_target)
    rho, h = block_thresholds(tokens, q_draft, p_target)
    eta = torch.rand(k, generator=generator, device=p_target.device, dtype=torch.float64)
    passed = (eta <= h).nonzero()
    tau = int(passed[-1]) + 1 if passed.numel() else 0
    law = None
    if tau < k:
        p = p_target[tau].double()
        law = _norm_or(torch.clamp(rho[tau] * p - q[tau], min=0.0), p)
    return _emit(tokens, p_target, generator, tau, law, h, eta)


def verify_block_cumprod(tokens, q_draft, p_target, generator) -> Verdict:
    """vllm-ascend's block verifier before PR #7808: prefix i passes when
    prod_{j<=i} min(1, p/q) >= prod_{j<=i} u_j, the longest passing prefix is kept, and the
    recovered token comes from the token-wise residual norm(max(0, p - q))."""
    k = tokens.numel()
    q, ratio = _ratios(tokens, q_draft, p_target)
    pi = torch.cumprod(ratio.clamp(max=1.0), 0)
    u = torch.rand(k, generator=generator, device=p_target.device, dtype=torch.float64)
    q_x = q[torch.arange(k, device=q.device), tokens.to(q.device)]
    legal = (pi >= torch.cumprod(u, 0)) & (q_x > 0)
    passed = legal.nonzero()
    tau = int(passed[-1]) + 1 if passed.numel() else 0
    law = None
    if tau < k:
        p = p_target[tau].double()
        law = _norm_or(torch.clamp(p - q[tau], min=0.0), p)
    return _emit(tokens, p_target, generator, tau, law, pi, u)
