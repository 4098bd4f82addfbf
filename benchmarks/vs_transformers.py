"""specviz vs transformers, greedy, same prompts, same pair, identical tokens asserted.

    .venv/bin/python benchmarks/vs_transformers.py --pair smollm2 [--tokens 48 --prompts 3 --repeats 2]
    .venv/bin/python benchmarks/vs_transformers.py --pair qwen --tokens 48 --prompts 2

Four systems run interleaved on each prompt (order rotated per prompt and repeat):
transformers ``generate`` (plain), transformers assisted generation (the same draft model with
``num_assistant_tokens=gamma``, constant schedule, no confidence stop; or
``prompt_lookup_num_tokens=gamma`` for the n-gram pair), specviz plain, specviz speculative.
On a CPU the specviz systems run on packed linear weights (:func:`specviz.use_packed_weights`,
oneDNN's blocked layout; ``--no-packed`` turns that off) and the transformers systems on the
stock kernels of the *same* model objects (:func:`specviz.stock_linears`). Two attribution
systems say where a ratio comes from: specviz speculative on the stock kernels
(``sv_spec_stock``: the loop alone) and transformers assisted generation on the packed
weights (``hf_assisted_packed``: the kernels alone).

Prints tokens/s (median over repeats) and the ratios the issue asks for:

* specviz plain / transformers plain          (floor 1.0x)
* specviz speculative / transformers assisted  (floor 1.3x)

``--static`` adds specviz on the static, position-indexed KV cache
(:func:`specviz.lm.use_static_cache`); ``--compile`` also compiles its decode forward
(``torch.compile``; meant for CUDA, where it uses CUDA graphs -- on this CPU it compiles with
inductor's default mode and rarely pays).

Also prints the bandwidth floor: weight bytes / measured memory bandwidth is the least time a
decode step can take, so (floor tokens/s) says how close plain decoding gets.
"""

from __future__ import annotations

import argparse
import time

import torch
from _bench import hf_generate, interleaved, load_pair, packed_flag, prompts, sv_plain, sv_spec

from specviz.lm import use_static_cache
from specviz.metrics import weights_bytes
from specviz.packed import packed_layers, stock_linears


def on_static_cache(fn, pair, max_length: int, compile: bool):
    """``fn`` run with the pair's models on the static cache (switched back afterwards, so
    the interleaved dynamic-cache systems are unaffected)."""
    models = [m for m in (pair.target, pair.draft_model) if isinstance(m, torch.nn.Module)]
    mode = "reduce-overhead" if torch.cuda.is_available() else "default"

    def run(x):
        for m in models:
            use_static_cache(m, max_length, compile=compile, mode=mode)
        try:
            return fn(x)
        finally:
            for m in models:
                use_static_cache(m, None)

    return run


def on_stock_kernels(fn, pair):
    """``fn`` run with every linear layer of the pair on the stock ``F.linear`` path."""

    def run(x):
        with stock_linears(pair.target, pair.draft_model):
            return fn(x)

    return run


def bandwidth_gbs(mb: int = 512) -> float:
    """Rough read bandwidth: time summing a buffer larger than the caches."""
    x = torch.ones(mb * 2**20 // 4)
    x.sum()
    t0 = time.perf_counter()
    for _ in range(3):
        x.sum()
    return 3 * x.numel() * 4 / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="smollm2", choices=["smollm2", "qwen"])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=None)
    ap.add_argument("--static", action="store_true", help="also specviz on the static KV cache")
    ap.add_argument("--compile", action="store_true", help="static cache + torch.compile")
    packed_flag(ap)  # transformers runs on the stock kernels of the same models either way
    args = ap.parse_args()
    if args.packed and args.compile:
        raise SystemExit("--compile needs --no-packed (torch.compile cannot trace packed weights)")
    pair = load_pair(args.pair, packed=args.packed)
    if args.gamma:
        pair.gamma = args.gamma
    ids = prompts(pair, args.prompts)
    T = args.tokens
    systems = {
        "hf_plain": on_stock_kernels(lambda x: hf_generate(pair, x, T, assisted=False), pair),
        "hf_assisted": on_stock_kernels(lambda x: hf_generate(pair, x, T, assisted=True), pair),
        "sv_plain": lambda x: sv_plain(pair, x, T).new_tokens,
        "sv_spec": lambda x: sv_spec(pair, x, T).new_tokens,
        "sv_spec_notrace": lambda x: sv_spec(pair, x, T, trace=False).new_tokens,
    }
    if args.packed:
        systems["sv_spec_stock"] = on_stock_kernels(systems["sv_spec"], pair)
        systems["hf_assisted_packed"] = lambda x: hf_generate(pair, x, T, assisted=True)
    if args.static or args.compile:
        room = max(len(x) for x in ids) + T + pair.gamma + 8
        for name, fn in (("sv_plain", systems["sv_plain"]), ("sv_spec", systems["sv_spec"])):
            systems[f"{name}_static"] = on_static_cache(fn, pair, room, args.compile)
        for name in ("sv_plain_static", "sv_spec_static"):  # compile / first-shape warm-up
            systems[name](ids[0])
    # Warm-up (first calls pay one-off costs), short: 4 tokens per system.
    with stock_linears(pair.target, pair.draft_model):
        hf_generate(pair, ids[0], 4, assisted=False)
        hf_generate(pair, ids[0], 4, assisted=True)
        sv_spec(pair, ids[0], 4)
    sv_plain(pair, ids[0], 4)
    sv_spec(pair, ids[0], 4)
    tally = interleaved(systems, ids, args.repeats, reference="hf_plain")
    tps = {k: tally.tps(k) for k in systems}
    print(
        f"pair: {pair.name}, gamma={pair.gamma}, {len(ids)} prompts x {T} tokens, greedy, "
        f"{args.repeats} repeats, torch threads={torch.get_num_threads()}, specviz on "
        + (
            f"packed weights ({packed_layers(pair.target)} linear layers)"
            if args.packed
            else "stock kernels"
        )
    )
    for k, v in tps.items():
        print(f"  {k:<16} {v:6.2f} tok/s")
    wb = weights_bytes(pair.target)
    bw = bandwidth_gbs()
    floor = bw * 1e9 / wb
    print(
        f"  bandwidth ~{bw:.1f} GB/s, target weights {wb / 1e9:.2f} GB -> "
        f"plain-decoding ceiling ~{floor:.1f} tok/s"
    )
    print(
        "ratios: geometric mean over (repeat, prompt) of same-cell tokens/s ratios "
        "(identical tokens asserted for every system and prompt):"
    )
    r = tally.ratio
    print(
        f"  specviz plain / transformers plain         {r('sv_plain', 'hf_plain'):.2f}x  (floor 1.0x)"
    )
    print(
        f"  specviz spec / transformers assisted       {r('sv_spec', 'hf_assisted'):.2f}x  (floor 1.3x)"
    )
    print(
        f"  specviz spec (no trace) / hf assisted      {r('sv_spec_notrace', 'hf_assisted'):.2f}x"
    )
    print(f"  specviz spec / specviz plain               {r('sv_spec', 'sv_plain'):.2f}x")
    if "sv_spec_static" in systems:
        print(
            f"  specviz plain, static cache / hf plain     {r('sv_plain_static', 'hf_plain'):.2f}x"
        )
        print(
            f"  specviz spec, static cache / hf assisted   "
            f"{r('sv_spec_static', 'hf_assisted'):.2f}x"
        )
    if args.packed:
        print("attribution (same run): the loop alone, the kernels alone")
        print(
            f"  specviz spec, stock kernels / hf assisted  {r('sv_spec_stock', 'hf_assisted'):.2f}x"
        )
        print(
            f"  hf assisted, packed / hf assisted          "
            f"{r('hf_assisted_packed', 'hf_assisted'):.2f}x"
        )
        print(
            f"  specviz spec / hf assisted, both packed    "
            f"{r('sv_spec', 'hf_assisted_packed'):.2f}x"
        )
    print(f"  transformers assisted / transformers plain {r('hf_assisted', 'hf_plain'):.2f}x")
    print(f"  specviz plain / bandwidth ceiling          {tps['sv_plain'] / floor:.0%}")


if __name__ == "__main__":
    main()
