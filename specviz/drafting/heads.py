"""A trained self-drafting head: EAGLE-style feature-level drafting for a decoder-only target.

Why features: the target's last hidden state f_t already summarises the whole context, so a
drafter that starts from it needs one small layer instead of a whole second model (EAGLE, Li
et al. 2024). The head predicts the target's next feature from ``[f_t, embed(x_{t+1})]``::

    z = fc([f_t ; e_{t+1}])            # [2H] -> [H]
    z = z + attn(norm(z))              # one Llama-style block with its own small KV cache
    z = z + mlp(norm(z))
    f_{t+1} ~ final_norm(z)            # the target's own final norm
    logits  = lm_head(f_{t+1})         # the target's own (tied) LM head, on a vocab subset

Only ``fc`` and the block are stored (fp16 safetensors, ~4 MB for SmolLM2-135M); the embedding,
the final norm and the LM head are the target's, shared rather than copied. Drafting k tokens
feeds the predicted feature back in as the next ``f``.

Draft vocabulary: for a 135M model the LM head is a fifth of the weights, so an LM-head pass
per drafted token would cost a quarter of a target call. The head drafts over the
``draft_vocab`` most useful tokens only (ids stored with the weights; FR-Spec style), which
keeps losslessness intact: q is the law over that subset (zero elsewhere), sampled from and
reported exactly; greedy drafts are the subset's argmax.

State and rollback: the engine hands the target's final normed hidden states of every kept
token to :meth:`HeadDrafter.observe_target`. Cache slot i holds the head's keys/values for the
input ``(f_i, x_{i+1})``; slots built from *predicted* features (the current draft) are cropped
at the next ``propose`` and rebuilt from the true features, so a rejection needs no other
bookkeeping.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.sampling import SamplingParams, logits_to_probs, sample
from .base import Draft, Drafter, TreeDraft
from .model import as_drafter
from .trees import TreeDrafter, grow_dynamic, grow_static

__all__ = [
    "HeadConfig",
    "EagleHead",
    "HeadDrafter",
    "default_head_path",
    "save_head",
    "load_head",
    "head_fingerprint",
    "training_time_test_mask",
]

WEIGHTS_SUFFIX = ".safetensors"
META_SUFFIX = ".json"


def default_head_path() -> Path:
    """The shipped SmolLM2-135M head (repository ``data/heads/``, beside ``data/prompts.jsonl``)."""
    return Path(__file__).resolve().parents[2] / "data" / "heads" / "smollm2-135m-eagle"


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10_000.0
    rms_eps: float = 1e-5

    @classmethod
    def for_target(cls, target: Any, intermediate_size: int = 768) -> HeadConfig:
        c = target.config
        heads = c.num_attention_heads
        return cls(
            hidden_size=c.hidden_size,
            num_heads=heads,
            num_kv_heads=getattr(c, "num_key_value_heads", heads),
            head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
            intermediate_size=intermediate_size,
            rms_eps=float(getattr(c, "rms_norm_eps", 1e-5)),
        )


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (half-split layout). x: [B, h, T, d], pos: [T]."""
    d = x.shape[-1]
    inv = _inv_freq(d, theta).to(x.device)  # [d/2]
    ang = pos.to(torch.float32)[:, None] * inv[None, :]  # [T, d/2]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@functools.lru_cache(maxsize=8)
def _inv_freq(d: int, theta: float) -> torch.Tensor:
    return theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)


class EagleHead(nn.Module):
    """fc + one pre-norm decoder block (GQA attention with RoPE, SwiGLU MLP)."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        H, h, kv, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.attn_norm = _RMSNorm(H, cfg.rms_eps)
        self.q_proj = nn.Linear(H, h * d, bias=False)
        self.k_proj = nn.Linear(H, kv * d, bias=False)
        self.v_proj = nn.Linear(H, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, H, bias=False)
        self.mlp_norm = _RMSNorm(H, cfg.rms_eps)
        self.gate_proj = nn.Linear(H, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, H, bias=False)

    def forward(
        self,
        feats: torch.Tensor,  # [B, T, H] the feature of the previous token (true or predicted)
        embs: torch.Tensor,  # [B, T, H] the embedding of the token itself
        pos: torch.Tensor,  # [T] slot positions
        past: tuple[torch.Tensor, torch.Tensor] | None = None,  # ([B,kv,S,d], [B,kv,S,d])
        mask: torch.Tensor | None = None,  # [T, S+T] bool, True = may attend; None = causal
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns the block output [B, T, H] and this call's keys/values [B, kv, T, d]."""
        cfg = self.cfg
        B, T, _ = feats.shape
        x = self.fc(torch.cat([feats, embs], dim=-1))  # [B, T, H]
        y = self.attn_norm(x)
        q = self.q_proj(y).view(B, T, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = _rope(q, pos, cfg.rope_theta), _rope(k, pos, cfg.rope_theta)
        keys = k if past is None else torch.cat([past[0], k], dim=2)  # [B, kv, S+T, d]
        vals = v if past is None else torch.cat([past[1], v], dim=2)
        if mask is None:
            S = keys.shape[2] - T
            mask = torch.ones(T, S + T, dtype=torch.bool, device=x.device).tril(S)
        rep = cfg.num_heads // cfg.num_kv_heads
        att = F.scaled_dot_product_attention(
            q, keys.repeat_interleave(rep, 1), vals.repeat_interleave(rep, 1), attn_mask=mask
        )  # [B, h, T, d]
        x = x + self.o_proj(att.transpose(1, 2).reshape(B, T, -1))
        y = self.mlp_norm(x)
        x = x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))
        return x, k, v


def training_time_test_mask(T: int, step: int, device: Any = None) -> torch.Tensor:
    """Attention mask for unrolled training step ``step`` (1-based) over slots 0..T-1.

    At draft step s the query at slot i sees what it would see at inference: the true slots
    up to i-s+1 (step-1 keys) and the predicted slots i-s+2..i (keys of steps 2..s, one each).
    Returns [T, s*T] bool over the concatenated keys [K_1 | K_2 | ... | K_s].
    """
    i = torch.arange(T, device=device)[:, None]  # [T, 1]
    j = torch.arange(T, device=device)[None, :]  # [1, T]
    blocks = [j <= i - step + 1]
    for r in range(2, step + 1):
        blocks.append(j == i - step + r)
    return torch.cat(blocks, dim=1)  # slots i < s-1 have no valid input; leave them out of losses


# -- files ---------------------------------------------------------------------------------


def save_head(
    path: str | Path,
    head: EagleHead,
    vocab_ids: torch.Tensor | None,
    meta: dict[str, Any],
) -> tuple[Path, Path]:
    """Write ``<path>.safetensors`` (fp16 weights + int32 draft vocab) and ``<path>.json``."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items()}
    if vocab_ids is not None:
        tensors["draft_vocab_ids"] = vocab_ids.to(torch.int32).contiguous()
    weights = path.with_name(path.name + WEIGHTS_SUFFIX)
    save_file(tensors, str(weights), metadata={"config": json.dumps(asdict(head.cfg))})
    weights.chmod(0o644)
    info = path.with_name(path.name + META_SUFFIX)
    info.write_text(json.dumps({"config": asdict(head.cfg), **meta}, indent=2) + "\n")
    return weights, info


def head_fingerprint(path: str | Path | None = None) -> str:
    """A short hash of a head's weights file (default: the shipped head): cached results
    computed with one set of weights must not be reused for another."""
    path = Path(path or default_head_path())
    weights = path if path.suffix == WEIGHTS_SUFFIX else path.with_name(path.name + WEIGHTS_SUFFIX)
    st = weights.stat()  # a grid builds a drafter per generation: hash each file version once
    return _file_sha256(str(weights.resolve()), st.st_mtime_ns, st.st_size)[:12]


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_head(path: str | Path) -> tuple[EagleHead, torch.Tensor | None, dict[str, Any]]:
    """Read a head written by :func:`save_head` (safetensors only; no pickle)."""
    from safetensors import safe_open

    path = Path(path)
    weights = path if path.suffix == WEIGHTS_SUFFIX else path.with_name(path.name + WEIGHTS_SUFFIX)
    if not weights.is_file():
        raise FileNotFoundError(f"no head weights at {weights} (run scripts/train_head.py)")
    with safe_open(str(weights), framework="pt") as f:
        cfg = HeadConfig(**json.loads(f.metadata()["config"]))
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    vocab = tensors.pop("draft_vocab_ids", None)
    head = EagleHead(cfg)
    head.load_state_dict({k: v.float() for k, v in tensors.items()})
    head.eval()
    info = weights.with_name(weights.name[: -len(WEIGHTS_SUFFIX)] + META_SUFFIX)
    meta = json.loads(info.read_text()) if info.is_file() else {}
    return head, (vocab.long() if vocab is not None else None), meta


# -- the drafter ---------------------------------------------------------------------------


class HeadDrafter(Drafter):
    """Drafts with an :class:`EagleHead` on top of the target's own features.

    Args:
        head: the trained head.
        embed: the target's input embedding (token ids -> [.., H]).
        final_norm: the target's final norm, applied to the head's output.
        lm_head_weight: the target's LM head matrix [V, H] (tied to the embedding in SmolLM2).
        vocab_ids: draft vocabulary subset (ids into V), or None for the full vocabulary.
        lookup: optional deterministic drafter (e.g. ``PromptLookupDrafter(min_ngram=2)`` or a
            ``SuffixDrafter``) asked first; when it proposes anything its draft is used as is
            (point masses), otherwise the head drafts. Copying wins on repeated text, the head
            elsewhere (cf. Arctic Inference's suffix + speculator hybrid). The choice depends
            on the context only, so verification stays exact.
        min_confidence: stop drafting when the head's own top probability (softmax over the
            draft vocabulary, T=1) falls below this. On a CPU a 5-token verification costs
            ~1.5 single-token steps, so drafting tokens that will be rejected is a net loss.
            The decision is taken before a token is drawn and depends on the drafted prefix
            only, so verification stays exact.
    """

    wants_target_hidden = True

    def __init__(
        self,
        head: EagleHead,
        embed: nn.Module,
        final_norm: nn.Module,
        lm_head_weight: torch.Tensor,
        vocab_ids: torch.Tensor | None = None,
        *,
        lookup: Any = None,
        min_confidence: float = 0.0,
        name: str = "eagle_head",
        tree: Sequence[int] | None = None,
        tree_sampling: str = "independent",
        dynamic: bool = False,
        budget: int | None = None,
        width: int = 4,
        max_depth: int = 6,
    ) -> None:
        self.min_confidence = min_confidence
        if tree is not None:
            checker = TreeDrafter(None, tree, tree_sampling, dynamic=dynamic, budget=budget,
                                  width=width, max_depth=max_depth, validate_only=True)  # fmt: skip
            self.tree = checker.branching
            budget, width, max_depth = checker.budget, checker.width, checker.max_depth
        else:
            self.tree = None
        self.tree_sampling = tree_sampling
        self.dynamic, self.budget, self.width = dynamic, budget, width
        self.max_depth = max_depth if dynamic else (len(tree) if tree is not None else 0)
        self.proposes_trees = tree is not None
        self.device = lm_head_weight.device
        self.head = head.to(self.device).eval()
        self.lookup = None if lookup is None else as_drafter(lookup)
        self.embed = embed
        self.final_norm = final_norm
        self.vocab_size = int(lm_head_weight.shape[0])
        self.vocab_ids = vocab_ids
        self.lm_head_weight = w = lm_head_weight.detach()  # [V, H], shared with the target
        self._w = w[vocab_ids].contiguous() if vocab_ids is not None else w  # [V', H]
        self.name = name if lookup is None else f"{name}+{getattr(lookup, 'name', 'lookup')}"
        if tree is not None:
            shape = f"dynamic(n={budget},k={tree[0]})" if dynamic else "x".join(map(str, tree))
            self.name += f"+tree[{shape},{tree_sampling}]"
        self.params = SamplingParams()
        self.reset()

    @property
    def memory_module(self) -> nn.Module:
        """What this drafter adds to the target's weights (the embedding, final norm and LM
        head are the target's own): the head, for :func:`specviz.metrics.memory_report`."""
        return self.head

    def kv_cache_bytes_per_token(self) -> int:
        """The head's own KV cache: one attention layer, K and V per token."""
        c = self.head.cfg
        elem = next(self.head.parameters()).element_size()
        return 2 * c.num_kv_heads * c.head_dim * elem

    @classmethod
    def from_pretrained(
        cls,
        target: Any,
        path: str | Path | None = None,
        *,
        lookup: Any = None,
        min_confidence: float = 0.0,
        **tree: Any,
    ) -> HeadDrafter:
        """The head at ``path`` (default: the shipped SmolLM2-135M head) on ``target``;
        ``tree=(k1, k2, ...)`` (and ``tree_sampling``, ``dynamic``, ``budget``) makes it
        propose token trees (see :class:`~specviz.drafting.trees.TreeDrafter`)."""
        head, vocab, meta = load_head(path or default_head_path())
        H = target.config.hidden_size
        if head.cfg.hidden_size != H:
            raise ValueError(
                f"head was trained for hidden size {head.cfg.hidden_size}, target has {H}"
            )
        lm = target.get_output_embeddings().weight
        trained_v = meta.get("target", {}).get("vocab_size")
        if trained_v is not None and trained_v != lm.shape[0]:
            raise ValueError(f"head was trained for vocab {trained_v}, target has {lm.shape[0]}")
        decoder = target.get_decoder() if hasattr(target, "get_decoder") else target.model
        name = f"eagle_head({Path(path).name if path else 'smollm2-135m'})"
        emb = target.get_input_embeddings()
        drafter = cls(
            head, emb, decoder.norm, lm, vocab, lookup=lookup, min_confidence=min_confidence,
            name=name, **tree,
        )  # fmt: skip
        drafter.cache_tag = head_fingerprint(path)  # keys cached grid cells to these weights
        return drafter

    # -- per-generation state -----------------------------------------------------------
    def reset(self) -> None:
        self._tokens: list[int] = []  # tokens whose true target features are known
        self._feats: list[torch.Tensor] = []  # their features, [H] each
        self._k: torch.Tensor | None = None  # [1, kv, S, d] head cache over slots 0..S-1
        self._v: torch.Tensor | None = None
        self._true_slots = 0  # cache slots built from true features only
        self._last_out: torch.Tensor | None = None  # [1, H] head output of the last true slot

    def start(self, prompt: torch.Tensor, params: SamplingParams) -> None:
        self.params = params
        self.reset()
        if self.lookup is not None:
            self.lookup.start(prompt, params)

    def end(self, context: Any) -> None:
        """End of a generation (see :func:`specviz.analysis.run_grid`): tell the lookup."""
        if self.lookup is not None:
            self.lookup.end(context)

    def observe_target(self, tokens: torch.Tensor, hidden: torch.Tensor) -> None:
        """The target's final normed features of the tokens it kept, in order."""
        self._tokens.extend(tokens.tolist())
        self._feats.extend(hidden.detach().float().to(self.device).unbind(0))

    @property
    def deterministic(self) -> bool:
        if self.tree is not None and self.tree_sampling == "deterministic":
            return self.lookup is None or self.lookup.deterministic
        return self.params.is_greedy and (self.lookup is None or self.lookup.deterministic)

    def fork(self) -> HeadDrafter:
        """Same head and weights; its own copy of the per-generation state (the head cache
        tensors are never written in place, so the twin may share them)."""
        twin = copy.copy(self)
        twin._tokens = list(self._tokens)
        twin._feats = list(self._feats)
        if self.lookup is not None:
            twin.lookup = self.lookup.fork()
        return twin

    # -- drafting ---------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        ctx = context.tolist()
        F_ = len(self._tokens)
        if F_ == 0 or F_ >= len(ctx) or ctx[:F_] != self._tokens:
            return Draft(torch.empty(0, dtype=torch.long))  # no usable target features yet
        self._crop(self._true_slots)
        # Slot i feeds (f_i, x_{i+1}); with features up to F-1 and tokens up to N-1 the true
        # slots run to min(F, N-1) - 1.
        last = min(F_, len(ctx) - 1)
        new = range(self._true_slots, last)
        if len(new):
            feats = torch.stack([self._feats[i] for i in new])  # [n, H]
            self._last_out = self._feed(feats, torch.tensor(ctx[1 + new.start : 1 + last]))[-1:]
        self._true_slots = last
        out = self._last_out  # [1, H]
        if self.lookup is not None:
            copied = self.lookup.propose(context, k, generator)
            if copied.tokens.numel():
                return copied if isinstance(copied, TreeDraft) else Draft(copied.tokens, None)
        if self.tree is not None:
            return self._propose_tree(out, k, generator)
        tokens, qs = [], []
        for i in range(k):
            feat = self.final_norm(out[-1])  # [H] predicted feature of the next token
            if self.min_confidence and not self._confident(feat):
                break
            tok, q = self._pick(feat, generator)
            tokens.append(tok)
            qs.append(q)
            if i + 1 < k:
                out = self._feed(feat[None], torch.tensor([tok]))
        ids = torch.tensor(tokens, dtype=torch.long)  # the engine wants draft tokens on the CPU
        return Draft(ids, torch.stack(qs) if qs else None)

    def _law(self, feat: torch.Tensor) -> torch.Tensor:
        """[V] the law the head's candidates for the next token are drawn from (zero off the
        draft vocabulary); greedy decoding ranks them by the plain softmax."""
        logits = self._w @ feat  # [V']
        probs = torch.softmax(logits.float(), -1) if self.params.is_greedy else logits_to_probs(
            logits, self.params)  # fmt: skip
        if self.vocab_ids is None:
            return probs
        q = torch.zeros(self.vocab_size, dtype=probs.dtype, device=probs.device)
        return q.index_copy_(0, self.vocab_ids.to(probs.device), probs)

    def _propose_tree(self, out: torch.Tensor, k: int, generator: torch.Generator) -> TreeDraft:
        """A token tree from the head: each node's head state (cache and output) is kept, so
        a child costs one head slot fed from its parent's state (the cache tensors are never
        written in place)."""
        sampling = "deterministic" if self.params.is_greedy else self.tree_sampling
        root = (self._k, self._v, self.final_norm(out[-1]))  # [H] predicted next feature
        states = {-1: root}

        def expand(tokens, parents, nodes):
            laws = []
            for node in nodes:
                k_, v_, feat = states[parents[node]]
                self._k, self._v = k_, v_
                child = self._feed(feat[None], torch.tensor([tokens[node]]))
                states[node] = (self._k, self._v, self.final_norm(child[-1]))
                laws.append(self._law(states[node][2]))
            return laws

        depth_cap = min(k, self.max_depth)
        empty = torch.empty(0, dtype=torch.long)
        if depth_cap <= 0:
            return TreeDraft(empty, empty, None, sampling)
        if self.dynamic:
            toks, pars, laws = grow_dynamic(self._law(root[2]), expand, self.tree[0], self.budget,
                                            self.width, depth_cap, sampling, generator)  # fmt: skip
        else:
            toks, pars, laws = grow_static(self._law(root[2]), expand, self.tree[:depth_cap],
                                           sampling, generator)  # fmt: skip
        self._k, self._v = root[0], root[1]  # the head cache holds the true slots again
        q = torch.stack(laws).cpu() if laws and not self.params.is_greedy else None
        t = torch.tensor(toks, dtype=torch.long)
        return TreeDraft(t, torch.tensor(pars, dtype=torch.long), q, sampling)

    def _confident(self, feat: torch.Tensor) -> bool:
        return float(torch.softmax(self._w @ feat, dim=-1).max()) >= self.min_confidence

    def _feed(self, feats: torch.Tensor, toks: torch.Tensor) -> torch.Tensor:
        """Append slots ([n, H] features, [n] tokens) to the head cache; return [n, H] outputs."""
        S = 0 if self._k is None else self._k.shape[2]
        pos = torch.arange(S, S + toks.numel(), device=self.device)
        past = None if self._k is None else (self._k, self._v)
        embs = self.embed(toks.to(self.device, torch.long))  # [n, H]
        out, k, v = self.head(feats[None].float(), embs[None].float(), pos, past)
        self._k = k if self._k is None else torch.cat([self._k, k], dim=2)
        self._v = v if self._v is None else torch.cat([self._v, v], dim=2)
        return out[0]

    def _crop(self, slots: int) -> None:
        if self._k is not None:
            self._k, self._v = self._k[:, :, :slots], self._v[:, :, :slots]

    def _pick(
        self, feat: torch.Tensor, generator: torch.Generator
    ) -> tuple[int, torch.Tensor | None]:
        """One drafted token and the law it was drawn from ([V], zero off the draft vocab).
        Greedy: the argmax, with the head's plain softmax as its q -- the verifier compares
        argmaxes only, but the trace shows the head's belief next to the target's p."""
        logits = self._w @ feat  # [V']
        if self.params.is_greedy:
            j = int(logits.argmax())
            probs = torch.softmax(logits.float(), -1)  # [V'] as _law ranks them
        else:
            probs = logits_to_probs(logits, self.params)  # [V'] what is sampled from
            j = int(sample(probs, generator))
        if self.vocab_ids is None:
            return j, probs
        q = torch.zeros(self.vocab_size, dtype=probs.dtype, device=probs.device)
        q.index_copy_(0, self.vocab_ids.to(probs.device), probs)
        return int(self.vocab_ids[j]), q
