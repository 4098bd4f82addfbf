"""Train the EAGLE-style self-drafting head of SmolLM2-135M on CPU.

    python scripts/train_head.py            # the shipped head -> data/heads/smollm2-135m-eagle.*
    python scripts/train_head.py --quick --out /tmp/head   # seconds; for tests

Pipeline (all from the target itself; no outside data):

1. the target's own greedy continuations of the ``train`` prompts (batched transformers
   ``generate`` with an explicit attention mask; cached on disk, so re-training is cheap);
2. teacher forcing over prompt + continuation: the target's final normed features f_t and
   its greedy next token at every position;
3. training with "training-time test" unrolling: draft step s feeds the head its own predicted
   feature from step s-1 under the attention mask it will meet at inference
   (:func:`specviz.heads.training_time_test_mask`), so errors that compound over a 4-token
   draft are trained against. Loss per step: smooth-L1 on the feature + cross-entropy of the
   target's greedy token over the draft vocabulary;
4. evaluation on the ``heldout`` prompts: mean accepted length (tokens per target call) at
   gamma=4, greedy, written to the JSON beside the weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import specviz as sv  # noqa: E402
from specviz.heads import (  # noqa: E402
    EagleHead,
    HeadConfig,
    HeadDrafter,
    default_head_path,
    save_head,
    training_time_test_mask,
)
from specviz.models import BUILTIN_MODELS, cache_dir, load_model, load_tokenizer  # noqa: E402
from specviz.prompts import load_prompts, render_prompt  # noqa: E402

MODEL = "smollm2-135m"


def log(msg: str) -> None:
    print(f"[train_head {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- 1. data -----------------------------------------------------------------------------


@torch.inference_mode()
def greedy_continuations(
    model, tok, prompts: list[list[int]], max_new_tokens: int, batch_size: int
) -> list[list[int]]:
    """prompt + the target's greedy continuation (up to EOS) for every prompt."""
    eos, out = tok.eos_token_id, [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # less padding
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        L = max(len(prompts[i]) for i in idx)
        x = torch.full((len(idx), L), eos, dtype=torch.long)
        mask = torch.zeros_like(x)
        for r, i in enumerate(idx):  # left padding, masked explicitly
            x[r, L - len(prompts[i]) :] = torch.tensor(prompts[i])
            mask[r, L - len(prompts[i]) :] = 1
        gen = model.generate(
            x,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos,
        )[:, L:]
        for r, i in enumerate(idx):
            new = gen[r].tolist()
            if eos in new:
                new = new[: new.index(eos) + 1]
            out[i] = prompts[i] + new
        log(f"  generated {min(b + batch_size, len(order))}/{len(order)} prompts")
    return out  # type: ignore[return-value]


def cached_sequences(model, tok, args) -> tuple[list[list[int]], int]:
    """(prompt + continuation per train prompt, number of prompt tokens in all)."""
    prompts = load_prompts(split="train")
    if args.quick:
        prompts = prompts[:: max(1, len(prompts) // 3)][:3]
    rendered = [render_prompt(tok, p) for p in prompts]
    key = hashlib.sha256(json.dumps([MODEL, rendered, args.max_new_tokens]).encode()).hexdigest()[
        :16
    ]
    path = cache_dir() / "heads" / f"{MODEL}-greedy-{key}.json"
    if path.is_file() and not args.quick:
        log(f"greedy continuations from cache {path}")
        return json.loads(path.read_text()), sum(map(len, rendered))
    log(f"generating greedy continuations of {len(rendered)} train prompts")
    seqs = greedy_continuations(model, tok, rendered, args.max_new_tokens, args.gen_batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(seqs))
    return seqs, sum(map(len, rendered))


@torch.inference_mode()
def teacher_force(model, seqs: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(features [T, H], the target's greedy next token at each position [T]) per sequence."""
    lm = model.get_output_embeddings().weight  # [V, H]
    out = []
    for s in seqs:
        feats = model.model(input_ids=torch.tensor([s])).last_hidden_state[0].float()  # [T, H]
        top = torch.cat([(c @ lm.T).argmax(-1) for c in feats.split(256)])  # [T]
        out.append((feats, top))
    return out


def draft_vocab(data, seqs, vocab_size: int, n: int) -> torch.Tensor:
    """The n ids the head drafts over: tokens the target produced or predicted in training,
    most frequent first, then the lowest ids (BPE merge order ~ corpus frequency)."""
    counts = torch.zeros(vocab_size)
    for (_, top), s in zip(data, seqs, strict=True):
        counts += torch.bincount(top, minlength=vocab_size).float()
        counts += torch.bincount(torch.tensor(s), minlength=vocab_size).float()
    seen = (counts > 0).nonzero().flatten()
    seen = seen[counts[seen].argsort(descending=True)][:n]
    rest = torch.ones(vocab_size, dtype=torch.bool)
    rest[seen] = False
    ids = torch.cat([seen, rest.nonzero().flatten()[: n - seen.numel()]])
    return ids.sort().values


# -- 2. training -------------------------------------------------------------------------


def batches(data, batch_size: int, gen: torch.Generator):
    perm = torch.randperm(len(data), generator=gen).tolist()
    for b in range(0, len(perm), batch_size):
        yield [data[i] for i in perm[b : b + batch_size]]


def pad_batch(items, embed, remap):
    """[B, T] padded tensors: features, embeddings, label ids (into the draft vocab), valid."""
    T = max(f.shape[0] for f, _, _ in items)
    B, H = len(items), items[0][0].shape[1]
    feats = torch.zeros(B, T, H)
    toks = torch.zeros(B, T, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for r, (f, top, s) in enumerate(items):
        n = f.shape[0]
        feats[r, :n], toks[r, :n], valid[r, :n] = f, torch.tensor(s), True
        labels[r, :n] = remap[top]
    with torch.no_grad():
        embs = embed(toks).float()
    return feats, embs, labels, valid


def unrolled_loss(head, norm, w_sub, feats, embs, labels, valid, steps, cls_weight):
    """Loss over ``steps`` unrolled draft steps; returns (loss, per-step top-1 accuracy)."""
    f_in, e_in = feats[:, :-1], embs[:, 1:]  # slot i: (f_i, x_{i+1}) -> f_{i+1}
    f_tgt, y, ok = feats[:, 1:], labels[:, 1:], valid[:, 1:]
    T = f_in.shape[1]
    pos = torch.arange(T)
    ks, vs, total, accs = [], [], 0.0, []
    prev = f_in
    for s in range(1, steps + 1):
        past = None if s == 1 else (torch.cat(ks, 2), torch.cat(vs, 2))
        mask = None if s == 1 else training_time_test_mask(T, s)
        out, k, v = head(prev, e_in, pos, past, mask)
        ks.append(k)
        vs.append(v)
        pred = norm(out)  # [B, T, H]
        live = ok.clone()
        live[:, : s - 1] = False  # slots without a valid unrolled input
        reg = F.smooth_l1_loss(pred[live], f_tgt[live])
        logits = pred[live] @ w_sub.T  # [N, V']
        cls = F.cross_entropy(logits, y[live], ignore_index=-100)
        total = total + (0.8 ** (s - 1)) * (reg + cls_weight * cls)
        hit = y[live] >= 0
        accs.append(float((logits.argmax(-1)[hit] == y[live][hit]).float().mean()))
        prev = torch.cat([f_in[:, :1], pred[:, :-1]], dim=1)  # slot i gets f^_i from slot i-1
    return total, accs


def train(model, data, seqs, vocab_ids, args) -> tuple[EagleHead, list[dict]]:
    torch.manual_seed(args.seed)
    cfg = HeadConfig.for_target(model, intermediate_size=args.intermediate)
    head = EagleHead(cfg)
    embed = model.get_input_embeddings()
    norm_w, eps = model.model.norm.weight.detach(), model.model.norm.variance_epsilon

    def norm(x: torch.Tensor) -> torch.Tensor:  # the target's final RMSNorm, frozen
        return norm_w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    w_sub = model.get_output_embeddings().weight[vocab_ids].detach()  # [V', H]
    remap = torch.full((model.config.vocab_size,), -100, dtype=torch.long)
    remap[vocab_ids] = torch.arange(vocab_ids.numel())
    items = [(f, top, s) for (f, top), s in zip(data, seqs, strict=True)]
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0)
    n_batches = math.ceil(len(items) / args.batch_size)
    total_steps = args.epochs * n_batches
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda i: (
            min(1.0, (i + 1) / max(1, total_steps // 10))
            * 0.5
            * (1 + math.cos(math.pi * i / total_steps))
        ),
    )
    gen = torch.Generator().manual_seed(args.seed)
    history = []
    for epoch in range(args.epochs):
        t0, losses, accs = time.perf_counter(), [], []
        for batch in batches(items, args.batch_size, gen):
            feats, embs, labels, valid = pad_batch(batch, embed, remap)
            if args.noise:
                feats = feats + args.noise * torch.randn_like(feats) * valid[..., None]
            loss, acc = unrolled_loss(
                head, norm, w_sub, feats, embs, labels, valid, args.unroll, args.cls_weight
            )
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            accs.append(acc)
        step_acc = [round(sum(a[s] for a in accs) / len(accs), 4) for s in range(args.unroll)]
        rec = {
            "epoch": epoch + 1,
            "loss": round(sum(losses) / len(losses), 4),
            "train_top1_per_step": step_acc,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        history.append(rec)
        log(
            f"  epoch {rec['epoch']}/{args.epochs} loss {rec['loss']} top1 {step_acc} ({rec['seconds']} s)"
        )
    head.eval()
    return head, history


# -- 3. evaluation ------------------------------------------------------------------------


def evaluate(model, tok, weights_stem: Path, args) -> dict:
    """Mean accepted length of the saved head on heldout prompts, gamma=4, greedy."""
    drafter = HeadDrafter.from_pretrained(model, weights_stem)
    prompts = load_prompts(split="heldout", per_category=args.eval_per_category)
    per_cat: dict[str, list[int]] = {}
    tokens = calls = 0
    for p in prompts:
        ids = render_prompt(tok, p)
        r = sv.speculative_generate(
            model,
            drafter,
            ids,
            gamma=4,
            max_new_tokens=args.eval_max_new_tokens,
            eos_token_id=tok.eos_token_id,
            trace=False,
        )
        tokens, calls = tokens + len(r.new_tokens), calls + r.target_calls
        c = per_cat.setdefault(p.category, [0, 0])
        c[0] += len(r.new_tokens)
        c[1] += r.target_calls
    mal = tokens / calls
    log(f"heldout mean accepted length (gamma=4, greedy): {mal:.3f} over {len(prompts)} prompts")
    return {
        "split": "heldout",
        "gamma": 4,
        "mode": "greedy",
        "prompts": len(prompts),
        "max_new_tokens": args.eval_max_new_tokens,
        "mean_accepted_length": round(mal, 4),
        "per_category": {k: round(a / b, 4) for k, (a, b) in per_cat.items()},
    }


# -- main -----------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_head_path(), help="output stem")
    ap.add_argument("--quick", action="store_true", help="3 prompts, tiny run (tests)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--unroll", type=int, default=3, help="training-time-test draft steps")
    ap.add_argument("--cls-weight", type=float, default=0.5)
    ap.add_argument("--noise", type=float, default=0.0, help="feature noise (std)")
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--eval-per-category", type=int, default=5, help="0: skip evaluation")
    ap.add_argument("--eval-max-new-tokens", type=int, default=64)
    ap.add_argument("--data-only", action="store_true", help="generate (and cache) the data, stop")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.max_new_tokens, args.epochs, args.unroll = 8, 1, 2
        args.draft_vocab, args.intermediate = 1024, 64
        args.eval_per_category, args.eval_max_new_tokens = 0, 0
    return args


def main(argv: list[str] | None = None, *, model=None, tokenizer=None) -> dict:
    """Run the pipeline; ``model``/``tokenizer`` may be passed in (tests reuse theirs)."""
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    model = model if model is not None else load_model(MODEL, progress=False)
    tok = tokenizer if tokenizer is not None else load_tokenizer(MODEL)
    model.eval()

    seqs, prompt_tokens = cached_sequences(model, tok, args)
    if args.data_only:
        return {"prompts": len(seqs), "tokens": sum(map(len, seqs))}
    t_data = time.perf_counter()
    data = teacher_force(model, seqs)
    positions = sum(f.shape[0] for f, _ in data)
    log(f"teacher forcing: {len(seqs)} sequences, {positions} positions")
    vocab_ids = draft_vocab(data, seqs, model.config.vocab_size, args.draft_vocab)
    head, history = train(model, data, seqs, vocab_ids, args)
    t_train = time.perf_counter()

    meta = {
        "kind": "eagle-style feature head (fc + 1 decoder block), shared embedding/norm/LM head",
        "target": {
            "name": MODEL,
            "hub_id": BUILTIN_MODELS[MODEL].hub_id,
            "gguf_sha256": BUILTIN_MODELS[MODEL].sha256,
            "vocab_size": model.config.vocab_size,
            "hidden_size": model.config.hidden_size,
        },
        "parameters": sum(p.numel() for p in head.parameters()),
        "draft_vocab": int(vocab_ids.numel()),
        "data": {
            "split": "train",
            "prompts": len(seqs),
            "generated_tokens": sum(len(s) for s in seqs) - prompt_tokens,
            "positions": positions,
            "max_new_tokens": args.max_new_tokens,
            "source": "target's own greedy continuations (transformers generate, batched)",
        },
        "training": {
            k: getattr(args, k)
            for k in (
                "epochs",
                "batch_size",
                "lr",
                "unroll",
                "cls_weight",
                "noise",
                "intermediate",
                "seed",
            )
        }
        | {"history": history, "threads": torch.get_num_threads()},
        "wall_seconds": {
            "data": round(t_data - t_start, 1),
            "train": round(t_train - t_data, 1),
        },
        "command": "python scripts/train_head.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }
    weights, info = save_head(args.out, head, vocab_ids, meta)
    log(f"wrote {weights} ({weights.stat().st_size / 1e6:.2f} MB) and {info}")
    if args.eval_per_category:
        meta["heldout_eval"] = evaluate(model, tok, args.out, args)
        meta["wall_seconds"]["eval"] = round(time.perf_counter() - t_train, 1)
        save_head(args.out, head, vocab_ids, meta)
    meta["wall_seconds"]["total"] = round(time.perf_counter() - t_start, 1)
    save_head(args.out, head, vocab_ids, meta)
    return meta


if __name__ == "__main__":
    main()
