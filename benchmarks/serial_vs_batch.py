"""Serial engine vs a one-row batch on the single-sequence path (issue 14).

    .venv/bin/python benchmarks/serial_vs_batch.py [--pair smollm2] [--prompts 3] [--tokens 48]
        > benchmarks/results/serial_vs_batch.txt

Both drivers run the same step (``specviz.decoding.step``); they differ in the runner under it:
the serial engine uses a single-sequence runner (the model's own KV cache, cropped on
rollback), the batched engine a masked cache (an attention mask and per-row positions on every
call, rejected slots left as holes). This script times both on the same prompts, greedy,
interleaved, tokens asserted identical, for plain decoding and for speculative decoding (prompt
lookup on SmolLM2, the 0.5B draft on the Qwen pair), and prints batch-of-one / serial tokens per
second: the reason the serial engine keeps its own runner (or not).
"""

from __future__ import annotations

import argparse

import torch
from _bench import interleaved, load_pair, packed_flag, prompts

import specviz as sv
from specviz.drafting import PromptLookupDrafter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="smollm2", choices=["smollm2", "qwen"])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    packed_flag(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, packed=args.packed)
    ids_list = prompts(pair, args.prompts)

    def drafter():
        return pair.draft_model if pair.draft_model is not None else PromptLookupDrafter()

    common = dict(max_new_tokens=args.tokens, eos_token_id=pair.eos)
    systems = {
        "serial plain": lambda ids: sv.autoregressive_generate(pair.target, ids, **common).new_tokens,
        "batch-of-one plain": lambda ids: sv.autoregressive_generate_batch(
            pair.target, [ids], **common).sequences[0],
        "serial speculative": lambda ids: sv.speculative_generate(
            pair.target, drafter(), ids, gamma=pair.gamma, trace=False, **common).new_tokens,
        "batch-of-one speculative": lambda ids: sv.speculative_generate_batch(
            pair.target, drafter(), [ids], gamma=pair.gamma, **common).sequences[0],
    }  # fmt: skip
    print(
        f"# {pair.name}: {len(ids_list)} prompts x {args.tokens} tokens x {args.repeats} repeats, "
        f"greedy, {args.threads} threads, packed={args.packed}"
    )
    tally = interleaved(systems, ids_list, args.repeats, reference="serial plain")
    print("\n| system | tokens/s | vs serial |\n|---|---:|---:|")
    for kind in ("plain", "speculative"):
        for name in (f"serial {kind}", f"batch-of-one {kind}"):
            ratio = tally.ratio(name, f"serial {kind}")
            print(f"| {name} | {tally.tps(name):.1f} | {ratio:.2f}x |")
    print("every output identical to serial plain decoding (asserted)")


if __name__ == "__main__":
    main()
