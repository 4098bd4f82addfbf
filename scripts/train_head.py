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
from transformers import DynamicCache

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import specviz as sv  # noqa: E402
from specviz.drafting import PromptLookupDrafter  # noqa: E402
from specviz.drafting.heads import (  # noqa: E402
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
ROUND_SEED = 100_003  # seed offset between sampling rounds
EXTRA_SEED = 200_003  # seed offset of the --extra-prompts rows
EXTRA_PROMPTS = ROOT / "data" / "head_prompts.jsonl"


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


# Generic follow-up turns: each makes the target continue its own first answer, so the
# train prompts yield several times more of the target's own greedy text.
FOLLOW_UPS = (
    "Thank you. Can you explain that in more detail?",
    "Please give your answer again in a different way.",
    "Continue.",
)


def _cached_round(
    model, tok, rendered: list[list[int]], args, label: str, counts: dict
) -> list[list[int]]:
    key = hashlib.sha256(json.dumps([MODEL, rendered, args.max_new_tokens]).encode()).hexdigest()
    path = cache_dir() / "heads" / f"{MODEL}-greedy-{key[:16]}.json"
    if path.is_file() and not args.quick:
        log(f"{label}: greedy continuations from cache {path.name}")
        counts["rounds_from_cache"] += 1
        return json.loads(path.read_text())
    log(f"{label}: generating greedy continuations of {len(rendered)} prompts")
    seqs = greedy_continuations(model, tok, rendered, args.max_new_tokens, args.gen_batch)
    if not args.quick:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(seqs))
    return seqs


def training_sequences(model, tok, args) -> tuple[list[tuple[list[int], int]], dict]:
    """(tokens, first position to learn from) per sequence, and counts for the metadata.

    Round 0: prompt + greedy answer for every train prompt. Round j: the same conversation
    plus the j-th follow-up turn and the target's greedy reply. Only the target's own answers
    are learned from (drafting only ever happens there); the prompts -- a system prompt shared
    by every conversation above all -- are attention context only."""
    prompts = load_prompts(split="train")
    if args.quick:
        prompts = prompts[:: max(1, len(prompts) // 2)][:2]
    rendered = [render_prompt(tok, p) for p in prompts]
    counts = {"prompts": len(prompts), "prompt_tokens": sum(map(len, rendered))}
    counts["generated_tokens"] = 0
    counts["rounds_from_cache"] = 0
    first = _cached_round(model, tok, rendered, args, "round 0", counts)
    out = [(s, len(ids)) for s, ids in zip(first, rendered, strict=True)]
    counts["generated_tokens"] += sum(map(len, first)) - counts["prompt_tokens"]
    for j, follow in enumerate(FOLLOW_UPS[: args.follow_ups], start=1):
        convs = []
        for p, ids, s in zip(prompts, rendered, first, strict=True):
            answer = tok.decode(s[len(ids) :], skip_special_tokens=True)
            msgs = p.messages_list() + [{"role": "assistant", "content": answer}]
            convs.append(render_prompt(tok, msgs + [{"role": "user", "content": follow}]))
        seqs = _cached_round(model, tok, convs, args, f"round {j}", counts)
        out += [(s, len(c)) for s, c in zip(seqs, convs, strict=True)]
        counts["generated_tokens"] += sum(len(s) - len(c) for s, c in zip(seqs, convs, strict=True))
    return out, counts


def _tensor_cache(kind: str, key_data: object) -> Path:
    key = hashlib.sha256(json.dumps([MODEL, kind, key_data]).encode()).hexdigest()
    return cache_dir() / "heads" / f"{MODEL}-{kind}-{key[:16]}.pt"


@torch.inference_mode()
def teacher_force(model, seqs: list[list[int]], *, quick: bool = False) -> list[tuple]:
    """(features [T, H], the target's greedy next token at each position [T]) per sequence.

    Features are stored in fp16 and cached on disk (one forward pass per sequence, once)."""
    path = _tensor_cache("features", seqs)
    if path.is_file() and not quick:
        log(f"teacher-forced features from cache {path.name}")
        return torch.load(path, weights_only=True)
    lm = model.get_output_embeddings().weight  # [V, H]
    out = []
    for s in seqs:
        feats = model.model(input_ids=torch.tensor([s])).last_hidden_state[0].float()  # [T, H]
        top = torch.cat([(c @ lm.T).argmax(-1) for c in feats.split(256)])  # [T]
        out.append((feats.half(), top))
    if not quick:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(out, path)
    return out


@torch.inference_mode()
def sample_rows(model, prompt: list[int], temps: list[float], max_new: int, eos: int, gen):
    """One prompt, ``len(temps)`` sampled continuations (row r at temperature temps[r]).

    The prompt is prefilled once and its KV cache repeated per row. The features the target
    computes while decoding are kept (no second teacher-forcing pass), together with its greedy
    token at each position. Returns (prompt features [P, H], per row: (tokens, features [n, H],
    greedy next token [n])), each row cut after its first EOS."""
    lm = model.get_output_embeddings().weight  # [V, H]
    B, P = len(temps), len(prompt)
    cache = DynamicCache()
    pf = model.model(input_ids=torch.tensor([prompt]), cache=cache).last_hidden_state[0]  # [P, H]
    cache.batch_repeat_interleave(B)
    t = torch.tensor(temps)[:, None]  # [B, 1]
    h = pf[-1:].expand(B, -1)  # [B, H] feature of the last prompt token
    toks, feats, tops = [], [], []
    for i in range(max_new):
        logits = h @ lm.T  # [B, V]
        if i:
            tops.append(logits.argmax(-1))
        x = torch.multinomial(torch.softmax(logits / t, dim=-1), 1, generator=gen)  # [B, 1]
        o = model.model(
            input_ids=x, cache=cache, use_cache=True, position_ids=torch.full((B, 1), P + i)
        )  # the cache grows in place
        h = o.last_hidden_state[:, -1]
        toks.append(x[:, 0])
        feats.append(h.half())
    tops.append((h @ lm.T).argmax(-1))
    toks_, feats_, tops_ = torch.stack(toks, 1), torch.stack(feats, 1), torch.stack(tops, 1)
    rows = []
    for r in range(B):
        row = toks_[r].tolist()
        n = row.index(eos) + 1 if eos in row else len(row)
        rows.append((row[:n], feats_[r, :n], tops_[r, :n]))
    return pf.half(), rows


def sampled_sequences(
    model, tok, args, prompts: list | None = None, *, extra: bool = False
) -> tuple[list, list, dict]:
    """Sampled continuations of every prompt (the train split unless ``prompts`` is given),
    temperatures cycling through ``args.temperatures``: ``args.samples`` rows per prompt and
    round, ``args.sample_rounds`` rounds (``args.extra_samples`` rows in one round for the
    ``extra`` prompts). Prompt j draws from its own torch.Generator seeded with
    ``args.seed + j`` (as :mod:`specviz.batch` seeds rows), so each prompt's rows are cached
    on their own and the same whichever process computes them: ``--sample-only --reverse`` in
    a second process fills the cache from the other end while the main run works forward.
    Returns (tokens, start) per sequence, (features, greedy token) per sequence, counts."""
    if prompts is None:
        prompts = load_prompts(split="train")
        if args.quick:
            prompts = prompts[:2]
    rendered = [render_prompt(tok, p) for p in prompts]
    n_rows, n_rounds = (args.extra_samples, 1) if extra else (args.samples, args.sample_rounds)
    base = args.seed + (EXTRA_SEED if extra else 0)
    temps = [args.temperatures[r % len(args.temperatures)] for r in range(n_rows)]
    # round r > 0 draws another n_rows rows per prompt from seed + j + r * ROUND_SEED
    # (round 0 keeps the original seeds, so earlier caches stay valid)
    units = [(r, j) for r in range(n_rounds) for j in range(len(rendered))]
    per_unit: dict = {}
    order = units[:: -1 if args.reverse else 1]
    t0, done, cached = time.perf_counter(), 0, 0
    for n, (r, j) in enumerate(order, start=1):
        ids = rendered[j]
        seed = base + j + r * ROUND_SEED
        path = _tensor_cache("sampled", [ids, temps, args.sample_new_tokens, seed])
        if path.is_file() and not args.quick:
            per_unit[r, j], cached = torch.load(path, weights_only=True), cached + 1
            continue
        if args.cached_samples_only:
            continue
        gen = torch.Generator().manual_seed(seed)
        per_unit[r, j] = sample_rows(
            model, ids, temps, args.sample_new_tokens, tok.eos_token_id, gen
        )
        if not args.quick:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(per_unit[r, j], path)
        done += sum(len(row[0]) for row in per_unit[r, j][1])
        rate = done / (time.perf_counter() - t0)
        log(f"  sampled {n}/{len(order)} prompt rounds, {done} new tokens ({rate:.0f} tok/s)")
    log(f"sampled continuations: {cached} prompt rounds from cache")
    keep = [u for u in units if u in per_unit]
    seqs, data = [], []
    for r, j in keep:
        ids, (pf, rows) = rendered[j], per_unit[r, j]
        top_p = torch.zeros(len(ids), dtype=torch.long)  # prompt slots carry no loss
        for row, f, top in rows:
            seqs.append((ids + row, len(ids)))
            data.append((torch.cat([pf, f]), torch.cat([top_p, top])))
    counts = {
        "sampled_prompts": len({j for _, j in keep}),
        "sample_rounds": n_rounds,
        "sampled_sequences": len(seqs),
        "sampled_tokens": sum(len(s) - st for s, st in seqs),
        "temperatures": sorted(set(temps)),
        "samples_per_prompt": n_rows,
        "sample_max_new_tokens": args.sample_new_tokens,
    }
    return seqs, data, counts


def load_extra_prompts(args) -> list:
    """The head-only training prompts (``--extra-prompts``; every one must be ``train``)."""
    if args.extra_prompts is None or str(args.extra_prompts) == "none":
        return []
    prompts = load_prompts(args.extra_prompts)
    wrong = [p.id for p in prompts if p.split != "train"]
    if wrong:
        raise ValueError(
            f"{args.extra_prompts}: extra training prompts must be split 'train': {wrong[:5]}"
        )
    return prompts[:2] if args.quick else prompts


def extra_sequences(model, tok, args, prompts: list) -> tuple[list, list, dict]:
    """The ``--extra-prompts`` data: one greedy answer per prompt, teacher-forced (its own
    caches, so the main train-split caches stay valid), plus ``--extra-samples`` sampled rows."""
    rendered = [render_prompt(tok, p) for p in prompts]
    c: dict = {"rounds_from_cache": 0}
    greedy = _cached_round(model, tok, rendered, args, "extra prompts", c)
    seqs = [(s, len(ids)) for s, ids in zip(greedy, rendered, strict=True)]
    data = teacher_force(model, greedy, quick=args.quick)
    counts = {
        "prompts": len(prompts),
        "prompts_file": Path(args.extra_prompts).name,
        "greedy_tokens": sum(len(s) - st for s, st in seqs),
    }
    if args.extra_samples:
        s_seqs, s_data, s_counts = sampled_sequences(model, tok, args, prompts, extra=True)
        seqs, data = seqs + s_seqs, data + s_data
        counts |= {k: s_counts[k] for k in ("sampled_sequences", "sampled_tokens")}
        counts["samples_per_prompt"] = s_counts["samples_per_prompt"]
    return seqs, data, counts


def draft_vocab(data, seqs, vocab_size: int, n: int) -> torch.Tensor:
    """The n ids the head drafts over: tokens the target produced or predicted in training,
    most frequent first, then the lowest ids (BPE merge order ~ corpus frequency)."""
    counts = torch.zeros(vocab_size)
    for (_, top), (s, _) in zip(data, seqs, strict=True):
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
    """Shuffled batches of similar lengths (less padding): chunks of 8 batches are sorted by
    length, cut into batches, and the batches shuffled."""
    perm, chunk, groups = torch.randperm(len(data), generator=gen).tolist(), 8 * batch_size, []
    for c in range(0, len(perm), chunk):
        part = sorted(perm[c : c + chunk], key=lambda i: data[i][0].shape[0])
        groups += [part[b : b + batch_size] for b in range(0, len(part), batch_size)]
    for g in torch.randperm(len(groups), generator=gen).tolist():
        yield [data[i] for i in groups[g]]


def pad_batch(items, embed, remap):
    """[B, T] padded tensors: features, embeddings, label ids (into the draft vocab), and the
    loss mask (real positions from each sequence's start)."""
    T = max(f.shape[0] for f, _, _ in items)
    B, H = len(items), items[0][0].shape[1]
    feats = torch.zeros(B, T, H)
    toks = torch.zeros(B, T, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for r, (f, top, (s, start)) in enumerate(items):
        n = f.shape[0]
        feats[r, :n], toks[r, :n], valid[r, start:n] = f, torch.tensor(s), True
        labels[r, :n] = remap[top]
    with torch.no_grad():
        embs = embed(toks).float()
    return feats, embs, labels, valid


def unrolled_loss(
    head, norm, w_sub, feats, embs, labels, valid, steps, cls_weight, soft=False, noise=0.0
):
    """Loss over ``steps`` unrolled draft steps; returns (loss, per-step top-1 accuracy).

    Classification is against the target's greedy token (hard) or, with ``soft``, against the
    target's whole distribution over the draft vocabulary (distillation: more signal per
    position, which matters with only ~10^4 training positions). ``noise`` (std) perturbs the
    input features only, as EAGLE does, so the head tolerates its own imperfect features.
    """
    f_in, e_in = feats[:, :-1], embs[:, 1:]  # slot i: (f_i, x_{i+1}) -> f_{i+1}
    if noise:
        f_in = f_in + noise * torch.randn_like(f_in)
    f_tgt, y, ok = feats[:, 1:], labels[:, 1:], valid[:, 1:]
    T = f_in.shape[1]
    pos = torch.arange(T)
    with torch.no_grad():  # only where a loss is taken (not prompt or padding slots)
        p_tgt = torch.softmax(f_tgt[ok] @ w_sub.T, dim=-1) if soft else None  # [N_ok, V']
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
        if soft:
            cls = -(p_tgt[live[ok]] * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        else:
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
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    n_batches = math.ceil(len(items) / args.batch_size)
    total_steps = args.epochs * n_batches
    t_begin, step = time.perf_counter(), 0

    def progress() -> float:
        """Fraction of training done: by steps, or by wall-clock with --train-seconds (a
        shared CPU's speed is unknown in advance; the card records the steps taken)."""
        done = step / total_steps
        if args.train_seconds:
            done = max(done, (time.perf_counter() - t_begin) / args.train_seconds)
        return min(1.0, done)

    def set_lr() -> None:  # linear warm-up over the first 5%, then cosine to zero
        x = progress()
        for g in opt.param_groups:
            g["lr"] = (
                args.lr * min(1.0, (x + 1 / total_steps) / 0.05) * 0.5 * (1 + math.cos(math.pi * x))
            )

    gen = torch.Generator().manual_seed(args.seed)
    # Feature noise is relative to the features' own spread (EAGLE adds U(-0.1, 0.1) to
    # features of unit scale); it makes the head tolerate its own imperfect predictions.
    sample_f = torch.cat([f[:: max(1, f.shape[0] // 16)] for f, _, _ in items[::16]]).float()
    noise = args.noise * float(sample_f.std())
    log(f"feature std {float(sample_f.std()):.3f}; input noise std {noise:.3f}")
    history = []
    for epoch in range(args.epochs):
        t0, losses, accs = time.perf_counter(), [], []
        for batch in batches(items, args.batch_size, gen):
            if progress() >= 1.0:
                break
            set_lr()
            feats, embs, labels, valid = pad_batch(batch, embed, remap)
            loss, acc = unrolled_loss(
                head, norm, w_sub, feats, embs, labels, valid, args.unroll, args.cls_weight,
                soft=args.soft, noise=noise,
            )  # fmt: skip
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            step += 1
            losses.append(float(loss.detach()))
            accs.append(acc)
            if step % 50 == 0:
                log(f"    step {step}: loss {losses[-1]:.3f} top1 {[round(a, 3) for a in acc]}")
        if not losses:
            break
        step_acc = [round(sum(a[s] for a in accs) / len(accs), 4) for s in range(args.unroll)]
        rec = {
            "epoch": epoch + 1,
            "loss": round(sum(losses) / len(losses), 4),
            "train_top1_per_step": step_acc,
            "seconds": round(time.perf_counter() - t0, 1),
            "steps": len(losses),
            "of_steps": n_batches,
        }
        history.append(rec)
        log(
            f"  epoch {rec['epoch']}/{args.epochs} loss {rec['loss']} top1 {step_acc} ({rec['seconds']} s)"
        )
    head.eval()
    return head, history


# -- 3. evaluation ------------------------------------------------------------------------


def evaluate(
    model, tok, weights_stem: Path, args, *, lookup: bool = False, split: str = "heldout"
) -> dict:
    """Mean accepted length of the saved head on heldout prompts, gamma=4, greedy; with
    ``lookup`` the head + prompt-lookup hybrid (copy when a 2-3-gram repeats, else the head).
    ``split="train"`` measures the same on the prompts the head was fit on: the gap between
    the two is how much the head memorised rather than learned."""
    copier = PromptLookupDrafter(max_ngram=3, min_ngram=2) if lookup else None
    drafter = HeadDrafter.from_pretrained(model, weights_stem, lookup=copier)
    prompts = load_prompts(split=split, per_category=args.eval_per_category)
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
    log(f"{split} mean accepted length (gamma=4, greedy), {drafter.name}: {mal:.3f}")
    return {
        "drafter": drafter.name,
        "split": split,
        "gamma": 4,
        "mode": "greedy",
        "prompts": len(prompts),
        "max_new_tokens": args.eval_max_new_tokens,
        "mean_accepted_length": round(mal, 4),
        "per_category": {k: round(a / b, 4) for k, (a, b) in per_cat.items()},
    }


# -- main -----------------------------------------------------------------------------------


def eval_only(model, tok, args, t_start: float) -> dict:
    """Evaluate the saved head and merge the result into its card (re-read just before the
    write, so two evaluations running at once both land)."""
    lookup = args.eval_only == "lookup"
    result = evaluate(model, tok, args.out, args, lookup=lookup, split=args.eval_split)
    key = f"{args.eval_split}_eval" + ("_with_lookup" if lookup else "")
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["command"] = "python scripts/train_head.py " + " ".join(
        sys.argv[1:] if args.argv is None else args.argv
    )
    info = args.out.with_name(args.out.name + ".json")
    card = json.loads(info.read_text())
    card[key] = result
    info.write_text(json.dumps(card, indent=2) + "\n")
    return card


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_head_path(), help="output stem")
    ap.add_argument("--quick", action="store_true", help="2 prompts, tiny run (tests)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument(
        "--follow-ups", type=int, default=len(FOLLOW_UPS), help="extra turns per prompt"
    )
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument("--samples", type=int, default=12, help="sampled rows per train prompt")
    ap.add_argument(
        "--sample-rounds",
        type=int,
        default=1,
        help="rounds of --samples rows per prompt (each round its own seeds and cache entry)",
    )
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 0.7, 0.9])
    ap.add_argument(
        "--extra-prompts",
        default=str(EXTRA_PROMPTS),
        help="head-only training prompts (JSONL, split 'train'; 'none' to skip)",
    )
    ap.add_argument("--extra-samples", type=int, default=6, help="sampled rows per extra prompt")
    ap.add_argument(
        "--extra-only", action="store_true", help="with --sample-only: sample the extra prompts"
    )
    ap.add_argument("--sample-new-tokens", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--train-seconds", type=float, default=None,
                    help="stop (and anneal the learning rate) by this wall-clock budget")  # fmt: skip
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--unroll", type=int, default=3, help="training-time-test draft steps")
    ap.add_argument("--cls-weight", type=float, default=0.5)
    ap.add_argument("--soft", action=argparse.BooleanOptionalAction, default=True,
                    help="distil the target's distribution (else its greedy token)")  # fmt: skip
    ap.add_argument("--noise", type=float, default=0.2, help="feature noise (std, relative)")
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--eval-per-category", type=int, default=5, help="0: skip evaluation")
    ap.add_argument("--eval-max-new-tokens", type=int, default=64)
    ap.add_argument("--eval-lookup", action=argparse.BooleanOptionalAction, default=True,
                    help="also evaluate the head with prompt lookup in front")  # fmt: skip
    ap.add_argument("--data-only", action="store_true", help="generate (and cache) the data, stop")
    ap.add_argument("--sample-only", action="store_true", help="only sample (fill the cache)")
    ap.add_argument("--reverse", action="store_true", help="sample the prompts in reverse order")
    ap.add_argument(
        "--cached-samples-only",
        action="store_true",
        help="train on the prompts whose sampled rows are cached (by --sample-only helpers) "
        "and sample no more",
    )
    ap.add_argument(
        "--eval-only",
        choices=["head", "lookup"],
        help="evaluate the saved head at --out (alone, or with prompt lookup) and add the "
        "result to its JSON card; both can run at once in two processes",
    )
    ap.add_argument(
        "--eval-split",
        choices=["heldout", "train"],
        default="heldout",
        help="with --eval-only: the prompts to measure on (train shows memorisation)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch default; 1 is robust on shared cores)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.argv = argv
    if args.quick:
        args.max_new_tokens, args.epochs, args.unroll, args.follow_ups = 8, 1, 2, 1
        args.samples, args.sample_new_tokens, args.extra_samples = 3, 6, 2
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
    if args.eval_only:
        return eval_only(model, tok, args, t_start)

    extra = load_extra_prompts(args)
    if args.sample_only:  # a helper process: only fill the sampled-data cache
        if args.extra_only:
            return sampled_sequences(model, tok, args, extra, extra=True)[2]
        return sampled_sequences(model, tok, args)[2]
    seqs, counts = training_sequences(model, tok, args)
    data = teacher_force(model, [s for s, _ in seqs], quick=args.quick)
    if args.samples:
        s_seqs, s_data, s_counts = sampled_sequences(model, tok, args)
        seqs, data, counts = seqs + s_seqs, data + s_data, counts | s_counts
    if extra:
        e_seqs, e_data, counts["extra_prompts"] = extra_sequences(model, tok, args, extra)
        seqs, data = seqs + e_seqs, data + e_data
    t_data = time.perf_counter()
    positions = sum(f.shape[0] - start for (f, _), (_, start) in zip(data, seqs, strict=True))
    log(f"data: {len(seqs)} sequences, {positions} positions to learn from")
    if args.data_only:
        return {"sequences": len(seqs), "positions": positions, **counts}
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
            "follow_up_turns": list(FOLLOW_UPS[: args.follow_ups]),
            "sequences": len(seqs),
            **counts,
            "positions": positions,
            "max_new_tokens": args.max_new_tokens,
            "source": (
                "target's own continuations: greedy (transformers generate, batched) with "
                "follow-up turns, plus sampled rows (several temperatures) per train prompt; "
                "greedy and sampled answers to the head-only prompts (extra_prompts)"
            ),
        },
        "training": {
            k: getattr(args, k)
            for k in (
                "epochs",
                "batch_size",
                "lr",
                "weight_decay",
                "unroll",
                "cls_weight",
                "soft",
                "noise",
                "samples",
                "sample_rounds",
                "extra_samples",
                "temperatures",
                "train_seconds",
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
    if args.eval_per_category:  # the card is rewritten after each evaluation
        meta["heldout_eval"] = evaluate(model, tok, args.out, args)
        meta["wall_seconds"]["eval"] = round(time.perf_counter() - t_train, 1)
        save_head(args.out, head, vocab_ids, meta)
        if args.eval_lookup:
            meta["heldout_eval_with_lookup"] = evaluate(model, tok, args.out, args, lookup=True)
            meta["wall_seconds"]["eval"] = round(time.perf_counter() - t_train, 1)
            save_head(args.out, head, vocab_ids, meta)
    meta["wall_seconds"]["total"] = round(time.perf_counter() - t_start, 1)
    save_head(args.out, head, vocab_ids, meta)
    return meta


if __name__ == "__main__":
    main()
