"""gamma x batch x acceptance sweep on a CUDA GPU: synthetic acceptance on random Llama shapes,
plus a real lossless pair, written as CSV and plots to benchmarks/results/<gpu-name>/.

    .venv/bin/python benchmarks/gpu_sweep.py                       # on a CUDA machine
    .venv/bin/python benchmarks/gpu_sweep.py --device cpu --tiny   # logic check, seconds

The synthetic part uses specviz.synthetic's LOSSY benchmark-only verifier (each draft accepted
with a fixed probability) on randomly initialised 1B-shaped target / 68M-shaped draft
Llamas: the compute is real, only the accept/reject coin is fake, so the speed of the engine
is measured as a function of acceptance. Every row also carries the plain-decoding time at
the same batch size measured in the same run, the speedup, and Leviathan's prediction from
the measured draft cost ratio c.

The real part runs SmolLM2-135M with an early-exit draft (greedy, lossless) over the same
gamma x batch grid.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import re
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
FIELDS = [
    "kind",
    "target",
    "draft",
    "dtype",
    "accept_rate",
    "gamma",
    "batch",
    "new_tokens",
    "spec_seconds",
    "plain_seconds",
    "spec_tokens_per_s",
    "plain_tokens_per_s",
    "speedup",
    "measured_accept",
    "tokens_per_call",
    "c",
    "predicted_speedup",
]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "device"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device):
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def _step_time(model, device, batch: int, context: int, repeats: int = 3) -> float:
    """Seconds of one decode step of ``model`` for ``batch`` rows at ``context`` tokens."""
    from specviz.decoding import autoregressive_generate_batch

    prompt = list(range(1, context + 1))
    autoregressive_generate_batch(model, prompt, num_sequences=batch, max_new_tokens=2)
    times = []
    for _ in range(repeats):
        _, t = _timed(
            lambda: autoregressive_generate_batch(
                model, prompt, num_sequences=batch, max_new_tokens=8
            ),
            device,
        )
        times.append(t / 8)
    return sorted(times)[len(times) // 2]


def sweep(
    target,
    draft,
    *,
    kind: str,
    names: tuple[str, str],
    dtype: str,
    device: torch.device,
    gammas: list[int],
    batches: list[int],
    accepts: list[float | None],
    tokens: int,
    prompt_len: int,
) -> list[dict]:
    from specviz.decoding import autoregressive_generate_batch, speculative_generate_batch
    from specviz.perf.theory import speedup

    prompt = list(range(1, prompt_len + 1))
    rows = []
    for batch in batches:
        c = _step_time(draft, device, batch, prompt_len) / _step_time(
            target, device, batch, prompt_len
        )
        plain, t_plain = _timed(
            lambda b=batch: autoregressive_generate_batch(
                target, prompt, num_sequences=b, max_new_tokens=tokens
            ),
            device,
        )
        n_plain = sum(len(s) for s in plain.sequences)
        for accept in accepts:
            verifier = "lossless" if accept is None else f"synthetic:{accept}"
            for gamma in gammas:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the synthetic warning, once per row
                    res, t_spec = _timed(
                        lambda b=batch, g=gamma, v=verifier: speculative_generate_batch(
                            target,
                            draft,
                            prompt,
                            num_sequences=b,
                            gamma=g,
                            max_new_tokens=tokens,
                            verifier=v,
                        ),
                        device,
                    )
                n_spec = sum(len(s) for s in res.sequences)
                drafted = sum(sum(d) for d in res.drafted_counts)
                accepted = sum(sum(a) for a in res.accepted_counts)
                calls = sum(len(a) for a in res.accepted_counts)
                a_meas = accepted / drafted if drafted else float("nan")
                a_pred = accept if accept is not None else a_meas
                rows.append(
                    {
                        "kind": kind,
                        "target": names[0],
                        "draft": names[1],
                        "dtype": dtype,
                        "accept_rate": "" if accept is None else accept,
                        "gamma": gamma,
                        "batch": batch,
                        "new_tokens": n_spec,
                        "spec_seconds": round(t_spec, 5),
                        "plain_seconds": round(t_plain, 5),
                        "spec_tokens_per_s": round(n_spec / t_spec, 3),
                        "plain_tokens_per_s": round(n_plain / t_plain, 3),
                        "speedup": round((n_spec / t_spec) / (n_plain / t_plain), 4),
                        "measured_accept": round(a_meas, 4),
                        "tokens_per_call": round(n_spec / calls, 4) if calls else "",
                        "c": round(c, 4),
                        "predicted_speedup": round(speedup(min(1.0, a_pred), gamma, c), 4)
                        if a_pred == a_pred
                        else "",
                    }
                )
                print(
                    f"{kind:9} a={rows[-1]['accept_rate']!s:5} g={gamma:2} B={batch:3} "
                    f"speedup {rows[-1]['speedup']:.2f}x (predicted "
                    f"{rows[-1]['predicted_speedup']}) {rows[-1]['spec_tokens_per_s']:.1f} tok/s",
                    flush=True,
                )
    return rows


def write_plots(rows: list[dict], out: Path) -> list[Path]:
    """speedup vs batch (one line per gamma, a panel per acceptance), as HTML (and PNG when
    kaleido can find a browser)."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:  # plotting is optional; the CSV is the result
        return []
    written = []
    for kind in sorted({r["kind"] for r in rows}):
        sub = [r for r in rows if r["kind"] == kind]
        accepts = sorted({str(r["accept_rate"]) for r in sub})
        fig = make_subplots(rows=1, cols=len(accepts), subplot_titles=[f"a={a}" for a in accepts])
        for j, a in enumerate(accepts, start=1):
            for g in sorted({r["gamma"] for r in sub}):
                pts = sorted(
                    (r["batch"], r["speedup"])
                    for r in sub
                    if str(r["accept_rate"]) == a and r["gamma"] == g
                )
                fig.add_trace(
                    go.Scatter(
                        x=[p[0] for p in pts],
                        y=[p[1] for p in pts],
                        name=f"gamma={g}",
                        legendgroup=str(g),
                        showlegend=j == 1,
                    ),
                    row=1,
                    col=j,
                )
            fig.update_xaxes(type="log", title_text="batch", row=1, col=j)
        fig.update_yaxes(title_text="speedup vs plain (same batch)", row=1, col=1)
        fig.add_hline(y=1.0, line_dash="dot")
        fig.update_layout(title=f"{kind}: speculative speedup vs batch size", height=420)
        path = out / f"speedup_vs_batch_{kind}.html"
        fig.write_html(path, include_plotlyjs="cdn")
        written.append(path)
        try:
            fig.write_image(out / f"speedup_vs_batch_{kind}.png")
            written.append(out / f"speedup_vs_batch_{kind}.png")
        except Exception as e:  # kaleido/chromium missing: HTML is enough
            print(f"(no PNG for {kind}: {type(e).__name__})")
    return written


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and grid (logic check)")
    ap.add_argument("--shape", default="1b", help="target Llama shape (1b, 8b, ...)")
    ap.add_argument("--draft-shape", default="draft-68m")
    ap.add_argument(
        "--layers", type=int, default=None, help="fewer target layers (8b on small GPUs)"
    )
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--gammas", default="1,2,4,6,8")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--accepts", default="0.5,0.7,0.8,0.9")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--no-real", action="store_true", help="skip the real SmolLM2 pair")
    ap.add_argument("--out", default=None, help="folder (default benchmarks/results/<gpu>)")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "gpu_sweep: CUDA is not available on this machine (torch "
            f"{torch.__version__}, cuda build {torch.version.cuda}); this sweep is meant for a "
            "GPU. For a logic check on CPU run: --device cpu --tiny"
        )
    from specviz.fixtures.shapes import random_llama

    dtype = getattr(torch, args.dtype)
    if args.tiny:
        t_shape, d_shape, dtype = "tiny", "tiny-draft", torch.float32
        gammas, batches, accepts = [1, 3], [1, 2], [0.5, 0.9]
        tokens, prompt_len = 8, 8
    else:
        t_shape, d_shape = args.shape, args.draft_shape
        gammas = [int(x) for x in args.gammas.split(",")]
        batches = [int(x) for x in args.batches.split(",")]
        accepts = [float(x) for x in args.accepts.split(",")]
        tokens, prompt_len = args.tokens, args.prompt_len
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    name = name or platform.machine()
    out = (
        Path(args.out)
        if args.out
        else HERE / "results" / _slug(name + ("-tiny" if args.tiny else ""))
    )
    out.mkdir(parents=True, exist_ok=True)

    target = random_llama(t_shape, dtype=dtype, device=device, num_layers=args.layers, seed=0)
    draft = random_llama(d_shape, dtype=dtype, device=device, seed=1)
    rows = sweep(
        target,
        draft,
        kind="synthetic",
        names=(t_shape if args.layers is None else f"{t_shape}-L{args.layers}", d_shape),
        dtype=str(dtype).replace("torch.", ""),
        device=device,
        gammas=gammas,
        batches=batches,
        accepts=accepts,
        tokens=tokens,
        prompt_len=prompt_len,
    )
    del target, draft
    if not args.no_real and not args.tiny:
        from specviz.drafting import early_exit_model
        from specviz.models import load_model

        model = load_model("smollm2-135m", device=device, progress=False)
        rows += sweep(
            model,
            early_exit_model(model, 20),
            kind="real",
            names=("smollm2-135m", "early_exit(L=20)"),
            dtype="float32",
            device=device,
            gammas=gammas,
            batches=batches,
            accepts=[None],
            tokens=tokens,
            prompt_len=prompt_len,
        )
    csv_path = out / "sweep.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    env = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "args": vars(args),
    }
    (out / "environment.json").write_text(json.dumps(env, indent=2))
    plots = write_plots(rows, out)
    print(f"wrote {csv_path} ({len(rows)} rows) and {len(plots)} plot(s) to {out}")
    return out


if __name__ == "__main__":
    main()
