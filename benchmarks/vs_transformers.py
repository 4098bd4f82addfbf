"""specviz vs transformers, greedy, same prompts, same pair, identical tokens asserted --
and where each stands against the memory-bandwidth limit of this host.

    .venv/bin/python benchmarks/vs_transformers.py --pair qwen --tokens 48 --prompts 2  # the default pair
    .venv/bin/python benchmarks/vs_transformers.py --pair smollm2 [--tokens 48 --prompts 3 --repeats 2]

Four systems run interleaved on each prompt (order rotated per prompt and repeat):
transformers ``generate`` (plain), transformers assisted generation (the same draft model with
``num_assistant_tokens=gamma``, constant schedule, no confidence stop; or
``prompt_lookup_num_tokens=gamma`` for the n-gram pair), specviz plain, specviz speculative.
On a CPU the specviz systems run on the kernels :func:`specviz.use_fastest_kernels` measured
faster on this host for each shape (oneDNN's packed weights or the stock ones, and the torch
thread count; printed first; ``--kernels packed|stock`` forces one) and the transformers
systems on the stock kernels of the *same* model objects (:func:`specviz.stock_linears`),
at the same thread count. When something is packed, two attribution systems say where a
ratio comes from: specviz speculative on the stock kernels (``sv_spec_stock``: the loop
alone) and transformers assisted generation on the packed weights (``hf_assisted_packed``:
the kernels alone).

Prints tokens/s (median over repeats) and the ratios the issue asks for:

* specviz plain / transformers plain          (floor 1.0x)
* specviz speculative / transformers assisted  (floor 1.0x)

and, against the limit: the read bandwidth measured in the same run, the plain-decoding
ceiling (bandwidth / target weight bytes: every decode step reads every weight once), the
speculative ceiling (E tokens per call for one target read plus gamma draft reads), and every
system's tokens/s as a fraction of them.

``--static`` adds specviz on the static, position-indexed KV cache
(:func:`specviz.lm.use_static_cache`); ``--compile`` also compiles its decode forward
(``torch.compile``; meant for CUDA, where it uses CUDA graphs -- on this CPU it compiles with
inductor's default mode and rarely pays).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from _bench import (
    hf_generate,
    interleaved,
    kernels_flag,
    load_pair,
    packed_arg,
    prompts,
    sv_plain,
    sv_spec,
)

from specviz.core.packed import packed_layers, stock_linears
from specviz.core.runners import use_static_cache
from specviz.perf import kernel_report
from specviz.perf.metrics import weights_bytes


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


def bandwidth_gbs(mb: int = 512, repeats: int = 5) -> float:
    """Read bandwidth at this process's torch threads: the best of ``repeats`` sums of a
    buffer larger than the caches (noise only ever slows a read down)."""
    x = torch.ones(mb * 2**20 // 4)
    x.sum()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = max(best, x.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    return best


def _kernels_line(pair) -> str:
    models = [m for m in (pair.target, pair.draft_model) if isinstance(m, torch.nn.Module)]
    reports = [kernel_report(m) for m in models]
    return "\n".join(r.summary() for r in reports if r is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="smollm2", choices=["smollm2", "qwen"])
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=None)
    ap.add_argument("--static", action="store_true", help="also specviz on the static KV cache")
    ap.add_argument("--compile", action="store_true", help="static cache + torch.compile")
    kernels_flag(ap)  # transformers runs on the stock kernels of the same models either way
    args = ap.parse_args()
    if args.kernels != "stock" and args.compile:
        raise SystemExit(
            "--compile needs --kernels stock (torch.compile cannot trace packed weights)"
        )
    pair = load_pair(args.pair, packed=packed_arg(args.kernels))
    print(_kernels_line(pair), flush=True)
    packed = bool(packed_layers(pair.target) or packed_layers(pair.draft_model or pair.target))
    if args.gamma:
        pair.gamma = args.gamma
    ids = prompts(pair, args.prompts)
    T = args.tokens
    calls: dict[str, list[tuple[int, int]]] = {"sv_spec": []}

    def spec_counted(x):
        r = sv_spec(pair, x, T)
        calls["sv_spec"].append((len(r.new_tokens), r.target_calls))
        return r.new_tokens

    systems = {
        "hf_plain": on_stock_kernels(lambda x: hf_generate(pair, x, T, assisted=False), pair),
        "hf_assisted": on_stock_kernels(lambda x: hf_generate(pair, x, T, assisted=True), pair),
        "sv_plain": lambda x: sv_plain(pair, x, T).new_tokens,
        "sv_spec": spec_counted,
        "sv_spec_notrace": lambda x: sv_spec(pair, x, T, trace=False).new_tokens,
    }
    if packed:
        systems["sv_spec_stock"] = on_stock_kernels(lambda x: sv_spec(pair, x, T).new_tokens, pair)
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
        + (f"{args.kernels} kernels ({packed_layers(pair.target)} packed linear layers)")
        + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for k, v in tps.items():
        print(f"  {k:<18} {v:6.2f} tok/s")
    print(
        "ratios: geometric mean over (repeat, prompt) of same-cell tokens/s ratios "
        "(identical tokens asserted for every system and prompt):"
    )
    r = tally.ratio
    print(
        f"  specviz plain / transformers plain         {r('sv_plain', 'hf_plain'):.2f}x  (floor 1.0x)"
    )
    print(
        f"  specviz spec / transformers assisted       {r('sv_spec', 'hf_assisted'):.2f}x  (floor 1.0x)"
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
            f"  specviz spec, static cache / hf assisted   {r('sv_spec_static', 'hf_assisted'):.2f}x"
        )
    if packed:
        print("attribution (same run): the loop alone, the kernels alone")
        print(
            f"  specviz spec, stock kernels / hf assisted  {r('sv_spec_stock', 'hf_assisted'):.2f}x"
        )
        print(
            f"  hf assisted, packed / hf assisted          {r('hf_assisted_packed', 'hf_assisted'):.2f}x"
        )
        print(
            f"  specviz spec / hf assisted, both packed    {r('sv_spec', 'hf_assisted_packed'):.2f}x"
        )
    print(f"  transformers assisted / transformers plain {r('hf_assisted', 'hf_plain'):.2f}x")
    against_the_limit(pair, tps, calls["sv_spec"])


def against_the_limit(pair, tps: dict[str, float], spec_calls: list[tuple[int, int]]) -> None:
    """How close each system gets to the memory-bandwidth ceiling: a decode step must read
    every target weight once, so bandwidth / weight bytes is the most plain tokens/s this host
    allows; a speculative call reads the target once and the draft gamma times, and commits E
    tokens (E measured in specviz's runs; greedy, the same draft in both systems)."""
    bw = bandwidth_gbs()
    wt = weights_bytes(pair.target)
    wd = weights_bytes(pair.draft_model) if isinstance(pair.draft_model, torch.nn.Module) else 0
    plain_ceiling = bw * 1e9 / wt
    e = sum(t for t, _ in spec_calls) / max(1, sum(c for _, c in spec_calls))
    spec_ceiling = e * bw * 1e9 / (wt + pair.gamma * wd)
    print(
        f"against the limit (same run): memory bandwidth {bw:.1f} GB/s (read, "
        f"{torch.get_num_threads()} threads), target weights {wt / 1e9:.2f} GB"
        + (f", draft {wd / 1e9:.2f} GB" if wd else "")
    )
    print(f"  plain-decoding ceiling {plain_ceiling:.1f} tok/s; speculative ceiling at the measured "
          f"E = {e:.2f} tokens per call {spec_ceiling:.1f} tok/s")  # fmt: skip
    for name, label, ceiling in (
        ("sv_plain", "specviz plain", plain_ceiling),
        ("hf_plain", "transformers plain", plain_ceiling),
        ("sv_spec", "specviz speculative", spec_ceiling),
        ("hf_assisted", "transformers assisted", spec_ceiling),
    ):
        print(f"  {label:<22} {tps[name]:6.2f} tok/s = {tps[name] / ceiling:4.0%} of its ceiling, "
              f"{tps[name] / plain_ceiling:4.0%} of the plain one")  # fmt: skip


if __name__ == "__main__":
    main()
