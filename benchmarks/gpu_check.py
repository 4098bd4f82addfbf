"""The one prepared check to run when a session is lent a CUDA GPU: correctness and speed of
specviz on real hardware in one short script that writes everything it measures as files.

    .venv/bin/python benchmarks/gpu_check.py                                  # CUDA, < 8 min
    .venv/bin/python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/x # CPU smoke test

Sections (in this order; each is timed, caught and recorded on its own):

* ``greedy_identity``: SmolLM2-135M fp32, greedy. specviz's plain decoding and speculative
  decoding (early-exit L=24 draft, prompt lookup) against ``transformers``' ``generate``, token
  for token. A divergence gets the target's top-1 minus top-2 logit at that position
  (teacher-forced on the transformers prefix) and a numerics/bug verdict
  (``specviz.stats.greedy_consistency``); a speculative row that differs also gets
  ``specviz.greedy_check`` (speculative vs specviz's own plain decoding). greedy_identity.csv
* ``exact_law``: a tiny random transformers Llama pair on the device; the exact law of all
  2-token continuations (``specviz.exact_continuation_law``) against sampled continuations
  of ``speculative_generate_batch``: Pearson p-value must be > 1e-3 for ``lossless`` and
  < 1e-6 for the negative control ``residual_from_target``. exact_law.csv
* ``gamma_batch``: SmolLM2 target, early-exit (L=8) draft, gamma x batch grid, greedy:
  tokens/s, speedup over plain decoding at the same batch size (plain measured before and
  after the gammas of that batch), model calls, acceptance. gamma_batch.csv
* ``static_compile``: plain and speculative (prompt lookup) greedy decoding on the dynamic
  cache, the static cache and the static cache + ``torch.compile`` ("reduce-overhead": CUDA
  graphs); the first call (which compiles) is timed apart from the warm runs, and every mode
  must give the eager tokens. Last, because a compile is the slowest and least predictable
  step. static_compile.csv

A total budget (``--budget-s``, default 420) skips the sections that would start too close to
it (recorded as skipped) and stops a running one at the budget (SIGALRM; recorded as timeout,
with the rows measured so far). ``summary.json`` (environment, per-section status, seconds,
errors, paths) is rewritten after every section, so it exists whatever happens.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SECTIONS = ("greedy_identity", "exact_law", "gamma_batch", "static_compile")

GREEDY_FIELDS = [
    "prompt",
    "category",
    "prompt_tokens",
    "system",
    "new_tokens",
    "hf_tokens",
    "identical",
    "first_divergence",
    "margin",
    "verdict",
    "gc_verdict",
    "gc_first_divergence",
    "gc_margin",
    "target_calls",
    "mean_accepted",
    "seconds",
    "hf_seconds",
]
LAW_FIELDS = [
    "verifier",
    "expect",
    "passed",
    "pvalue",
    "statistic",
    "dof",
    "method",
    "n_samples",
    "n_outcomes",
    "support",
    "tv_empirical",
    "chunk",
    "gamma",
    "temperature",
    "seconds",
    "samples_per_s",
    "law_seconds",
]
SWEEP_FIELDS = [
    "batch",
    "gamma",
    "draft",
    "new_tokens",
    "spec_seconds",
    "plain_seconds",
    "plain_seconds_before",
    "plain_seconds_after",
    "spec_tokens_per_s",
    "plain_tokens_per_s",
    "speedup",
    "model_calls",
    "plain_model_calls",
    "mean_accepted_per_call",
    "acceptance_rate",
    "tokens_per_call",
    "rows_identical_to_plain",
]
STATIC_FIELDS = [
    "mode",
    "system",
    "phase",
    "repeat",
    "status",
    "reason",
    "prompts",
    "tokens",
    "seconds",
    "tokens_per_s",
    "tokens_equal_eager",
]
CSV = {
    "greedy_identity": ("greedy_identity.csv", GREEDY_FIELDS),
    "exact_law": ("exact_law.csv", LAW_FIELDS),
    "gamma_batch": ("gamma_batch.csv", SWEEP_FIELDS),
    "static_compile": ("static_compile.csv", STATIC_FIELDS),
}


@dataclass(frozen=True)
class Config:
    prompts: int
    new_tokens: int  # greedy identity and static/compile
    samples: int  # per verifier, exact law
    chunk: int  # rows per speculative_generate_batch call, exact law
    gammas: tuple[int, ...]
    batches: tuple[int, ...]
    sweep_tokens: int
    draft_layers: int  # early-exit draft of the sweep
    compile: bool
    warm_repeats: int
    need_s: dict[str, float]  # a section starts only with this much budget left
    cap_s: dict[str, float]  # soft cap: a section starts no new unit of work past it


FULL = Config(
    prompts=6,
    new_tokens=64,
    samples=20_000,
    chunk=2_500,
    gammas=(1, 2, 4, 8),
    batches=(1, 4, 16, 64),
    sweep_tokens=32,
    draft_layers=8,
    compile=True,
    warm_repeats=2,
    need_s={"greedy_identity": 20, "exact_law": 15, "gamma_batch": 30, "static_compile": 45},
    cap_s={"greedy_identity": 75, "exact_law": 90, "gamma_batch": 150, "static_compile": 300},
)
TINY = Config(
    prompts=2,
    new_tokens=8,
    samples=2_000,
    chunk=1_000,
    gammas=(1, 2),
    batches=(1, 2),
    sweep_tokens=8,
    draft_layers=8,
    compile=False,
    warm_repeats=1,
    need_s={s: 1 for s in SECTIONS},
    cap_s={s: 600 for s in SECTIONS},
)
LAW_TEMPERATURE = 0.8
LAW_GAMMA = 2
LAW_PROMPT = [1, 2, 3]
P_LOSSLESS_MIN = 1e-3
P_CONTROL_MAX = 1e-6


class BudgetExceeded(BaseException):
    """Raised by SIGALRM when the budget runs out mid-section (a BaseException, so that no
    library ``except Exception`` swallows it)."""


class CheckFailed(Exception):
    """A section ran but what it checks did not hold."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "device"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _r(x: float | None, digits: int = 4) -> Any:
    if x is None:
        return ""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return round(x, digits)


# --------------------------------------------------------------------------- the run


class Run:
    def __init__(self, args: argparse.Namespace, cfg: Config, device: torch.device, out: Path):
        self.args, self.cfg, self.device, self.out = args, cfg, device, out
        self.t0 = time.perf_counter()
        self.budget = float(args.budget_s)
        self.sections: dict[str, dict] = {}
        self.env: dict[str, Any] = {}
        self._smol: tuple[Any, Any] | None = None
        self._smol_error: BaseException | None = None
        self._prompts: list[tuple[str, list[int]]] | None = None

    # ---- shared resources (loaded once, on first use)
    def smol(self) -> tuple[Any, Any]:
        if self._smol_error is not None:
            raise RuntimeError(f"SmolLM2 failed to load earlier: {self._smol_error!r}")
        if self._smol is None:
            from specviz.models import load_model, load_tokenizer

            try:
                (tok, model), took = _timed(
                    lambda: (
                        load_tokenizer("smollm2-135m", progress=False),
                        load_model(
                            "smollm2-135m",
                            device=self.device,
                            dtype=torch.float32,
                            progress=False,
                        ),
                    ),
                    self.device,
                )
            except Exception as e:
                self._smol_error = e
                raise
            self.env["smollm2_load_s"] = round(took, 2)
            print(f"  loaded SmolLM2-135M on {self.device} in {took:.1f} s", flush=True)
            self._smol = (model, tok)
        return self._smol

    def prompts(self) -> list[tuple[str, list[int]]]:
        if self._prompts is None:
            from specviz.prompts import load_prompts, render_prompt

            _, tok = self.smol()
            chosen = load_prompts(per_category=1)[: self.cfg.prompts]
            self._prompts = [(p.category, render_prompt(tok, p)) for p in chosen]
        return self._prompts

    # ---- budget
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def remaining(self) -> float:
        return self.budget - self.elapsed()

    def over_cap(self, notes: dict, what: str) -> bool:
        """True (and noted) once the running section has used its soft cap: the caller then
        starts no further unit of work (``what``) and the section ends with what it has."""
        used = time.perf_counter() - self._section_t0
        if used < self._section_cap:
            return False
        notes.setdefault("truncated", []).append(
            f"stopped before {what}: section soft cap {self._section_cap:.0f} s reached"
        )
        print(f"  (soft cap {self._section_cap:.0f} s reached: not starting {what})", flush=True)
        return True

    # ---- sections
    def section(self, name: str, fn: Callable[[Run, list[dict], dict], None]) -> None:
        rec: dict[str, Any] = {"status": "running", "seconds": 0.0}
        self.sections[name] = rec
        wanted = self.args.sections
        if wanted and name not in wanted:
            rec.update(status="skipped", reason="not selected (--sections)")
            self._report(name, rec)
            return
        need = self.cfg.need_s[name]
        if self.remaining() < need:
            rec.update(
                status="skipped",
                reason=f"budget: {self.remaining():.0f} s left of {self.budget:.0f} s, "
                f"section needs >= {need:.0f} s",
            )
            self._report(name, rec)
            return
        rows: list[dict] = []
        notes: dict[str, Any] = {}
        print(f"\n=== {name} (elapsed {self.elapsed():.1f} s) ===", flush=True)
        t0 = self._section_t0 = time.perf_counter()
        self._section_cap = self.cfg.cap_s[name]
        use_alarm = hasattr(signal, "setitimer")
        old = None
        if use_alarm:
            old = signal.signal(signal.SIGALRM, _on_alarm)
            signal.setitimer(signal.ITIMER_REAL, max(1.0, self.remaining()))
        try:
            fn(self, rows, notes)
            rec["status"] = "ok"
        except BudgetExceeded:
            rec.update(
                status="timeout",
                reason=f"budget of {self.budget:.0f} s reached mid-section; rows so far kept",
            )
        except CheckFailed as e:
            rec.update(status="failed", error=str(e))
        except Exception as e:
            rec.update(
                status="error",
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc()[-4000:],
            )
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        rec.update(notes)
        filename, fields = CSV[name]
        path = self.out / filename
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        rec["csv"] = str(path)
        rec["rows"] = len(rows)
        self._report(name, rec)

    def _report(self, name: str, rec: dict) -> None:
        extra = rec.get("reason") or rec.get("error") or ""
        print(
            f"--- {name}: {rec['status']} in {rec['seconds']:.1f} s "
            f"(elapsed {self.elapsed():.1f} s of budget {self.budget:.0f} s)"
            + (f": {extra}" if extra else ""),
            flush=True,
        )
        self.write_summary()

    def write_summary(self, finished: bool = False) -> Path:
        path = self.out / "summary.json"
        summary = {
            "script": "benchmarks/gpu_check.py",
            "argv": sys.argv[1:],
            "finished": finished,
            "total_seconds": round(self.elapsed(), 2),
            "budget_s": self.budget,
            "environment": self.env,
            "config": asdict(self.cfg),
            "sections": self.sections,
            "paths": {
                "out": str(self.out),
                "summary": str(path),
                **{n: r["csv"] for n, r in self.sections.items() if "csv" in r},
            },
        }
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        tmp.replace(path)
        return path


def _on_alarm(signum, frame):  # noqa: ARG001
    raise BudgetExceeded()


# --------------------------------------------------------------------------- environment


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    import specviz

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": transformers.__version__,
        "specviz": specviz.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu_name=props.name,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_count=torch.cuda.device_count(),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        )
        if shutil.which("nvidia-smi"):
            try:
                q = "--query-gpu=driver_version,name,memory.total,clocks.max.sm"
                env["nvidia_smi"] = subprocess.run(
                    ["nvidia-smi", q, "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=15,
                ).stdout.strip()
            except Exception as e:  # diagnostics only
                env["nvidia_smi"] = f"failed: {e!r}"
    else:
        env["cpu"] = platform.processor() or platform.machine()
    try:
        git = ["git", "-C", str(REPO)]
        env["git_commit"] = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain"], capture_output=True, text=True, timeout=10
        ).stdout
        env["git_dirty_files"] = len(dirty.splitlines())
    except Exception:  # no git (a copied tree): fine
        env["git_commit"] = None
    return env


# --------------------------------------------------------------------------- 1. greedy identity


@torch.inference_mode()
def _margin(model: Any, prefix: list[int]) -> float:
    """Top-1 minus top-2 logit after ``prefix``, one full teacher-forced forward pass."""
    ids = torch.tensor([prefix], device=next(model.parameters()).device)
    top = torch.topk(model(ids).logits[0, -1].float(), 2).values
    return float(top[0] - top[1])


def greedy_identity(run: Run, rows: list[dict], notes: dict) -> None:
    import specviz as sv
    from specviz import stats
    from specviz.drafting import EarlyExitDrafter

    model, tok = run.smol()
    eos, n, dev = tok.eos_token_id, run.cfg.new_tokens, run.device
    kw = dict(max_new_tokens=n, eos_token_id=eos)
    drafts: dict[str, Callable[[], Any] | None] = {
        "autoregressive": None,
        "spec_early_exit24": lambda: EarlyExitDrafter(model, 24),
        "spec_prompt_lookup": sv.PromptLookupDrafter,
    }
    verdicts: Counter = Counter()
    for i, (cat, ids) in enumerate(run.prompts()):
        if i and run.over_cap(notes, f"prompt {i}"):
            break
        x = torch.tensor([ids], device=dev)
        out, hf_s = _timed(
            lambda x=x: model.generate(
                x,
                attention_mask=torch.ones_like(x),  # explicit: never infer padding
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                max_new_tokens=n,
                eos_token_id=eos,
                pad_token_id=eos,
            ),
            dev,
        )
        hf = out[0, len(ids) :].tolist()
        for system, make_draft in drafts.items():
            if make_draft is None:
                res, took = _timed(
                    lambda ids=ids: sv.autoregressive_generate(model, ids, **kw), dev
                )
            else:
                res, took = _timed(
                    lambda ids=ids, d=make_draft: sv.speculative_generate(
                        model, d(), ids, gamma=4, trace=False, **kw
                    ),
                    dev,
                )
            got = list(res.new_tokens)
            d = _first_divergence(hf, got)
            row = {
                "prompt": i,
                "category": cat,
                "prompt_tokens": len(ids),
                "system": system,
                "new_tokens": len(got),
                "hf_tokens": len(hf),
                "identical": d is None,
                "first_divergence": "" if d is None else d,
                "margin": "",
                "verdict": "identical",
                "gc_verdict": "",
                "gc_first_divergence": "",
                "gc_margin": "",
                "target_calls": res.target_calls,
                "mean_accepted": _r(
                    sum(res.accepted_counts) / len(res.accepted_counts)
                    if res.accepted_counts
                    else None
                ),
                "seconds": _r(took),
                "hf_seconds": _r(hf_s),
            }
            if d is not None:
                m = _margin(model, ids + hf[:d])
                g = stats.greedy_consistency([hf], [got], [m])
                row.update(margin=_r(m, 6), verdict=g.verdicts[0])
                if make_draft is not None:  # speculative vs specviz's own plain decoding
                    rep = sv.greedy_check(model, make_draft(), [ids], gamma=4, progress=False, **kw)
                    gd, gm = rep.result.first_divergence[0], rep.result.margins[0]
                    row.update(
                        gc_verdict=rep.verdict,
                        gc_first_divergence="" if gd is None else gd,
                        gc_margin=_r(gm, 6),
                    )
            verdicts[row["verdict"]] += 1
            rows.append(row)
            what = (
                "identical"
                if d is None
                else f"diverges at {d}: {row['verdict']} (margin {row['margin']})"
            )
            print(
                f"  prompt {i} ({cat}, {len(ids)} tok) {system:19} {what} "
                f"{len(got) / took:7.1f} tok/s (hf {len(hf) / hf_s:.1f})",
                flush=True,
            )
    notes["verdicts"] = dict(verdicts)
    if verdicts["bug"]:
        raise CheckFailed(
            f"{verdicts['bug']} of {len(rows)} outputs diverge from transformers with a clear "
            "logit margin (verdict 'bug'); see greedy_identity.csv"
        )


# --------------------------------------------------------------------------- 2. exact law


def exact_law(run: Run, rows: list[dict], notes: dict) -> None:
    import numpy as np

    import specviz as sv
    from specviz.fixtures.llamas import tiny_llama_pair
    from specviz.stats import goodness_of_fit

    dev = run.device
    target, draft = tiny_llama_pair(7, seed=0)
    target, draft = target.to(dev), draft.to(dev)
    params = sv.SamplingParams(True, temperature=LAW_TEMPERATURE)
    law, law_s = _timed(lambda: sv.exact_continuation_law(target, LAW_PROMPT, 2, params), dev)
    notes["law_support"] = len(law)
    total, chunk = run.cfg.samples, run.cfg.chunk
    failures = []
    for verifier, expect in (
        ("lossless", f"p > {P_LOSSLESS_MIN:g}"),
        ("residual_from_target", f"p < {P_CONTROL_MAX:g}"),
    ):
        counts: Counter = Counter()
        t0 = time.perf_counter()
        for start in range(0, total, chunk):
            # each verifier gets half of the section's soft cap (the first chunk always runs)
            if start and time.perf_counter() - t0 > run.cfg.cap_s["exact_law"] / 2:
                notes.setdefault("truncated", []).append(
                    f"{verifier}: {start} of {total} samples (half the soft cap reached)"
                )
                break
            res = sv.speculative_generate_batch(
                target,
                draft,
                LAW_PROMPT,
                num_sequences=min(chunk, total - start),
                gamma=LAW_GAMMA,
                max_new_tokens=2,
                do_sample=True,
                temperature=LAW_TEMPERATURE,
                seed=start,  # row i of a chunk uses seed start + i: no seed is reused
                verifier=verifier,
            )
            counts.update(tuple(s) for s in res.sequences)
        _sync(dev)
        took = time.perf_counter() - t0
        keys = sorted(set(law) | set(counts))  # an outcome outside the law: p = 0 -> refuted
        obs = np.array([counts.get(k, 0) for k in keys])
        probs = np.array([law.get(k, 0.0) for k in keys])
        r = goodness_of_fit(obs, probs)
        n = int(obs.sum())
        ok = r.pvalue > P_LOSSLESS_MIN if verifier == "lossless" else r.pvalue < P_CONTROL_MAX
        rows.append(
            {
                "verifier": verifier,
                "expect": expect,
                "passed": bool(ok),
                "pvalue": float(r.pvalue),
                "statistic": float(r.statistic),
                "dof": r.dof,
                "method": r.method,
                "n_samples": n,
                "n_outcomes": len(counts),
                "support": len(law),
                "tv_empirical": _r(0.5 * float(np.abs(obs / n - probs).sum()), 5),
                "chunk": chunk,
                "gamma": LAW_GAMMA,
                "temperature": LAW_TEMPERATURE,
                "seconds": _r(took, 3),
                "samples_per_s": _r(n / took, 1),
                "law_seconds": _r(law_s, 3),
            }
        )
        print(
            f"  {verifier:21} n={n} p={r.pvalue:.3g} ({expect}: {'ok' if ok else 'FAILED'}) "
            f"{took:.1f} s, {n / took:.0f} samples/s",
            flush=True,
        )
        if not ok:
            failures.append(f"{verifier}: p={r.pvalue:.3g}, expected {expect}")
    notes["pvalues"] = {row["verifier"]: row["pvalue"] for row in rows}
    if failures:
        raise CheckFailed("; ".join(failures))


# --------------------------------------------------------------------------- 3. gamma x batch


def gamma_batch(run: Run, rows: list[dict], notes: dict) -> None:
    import specviz as sv
    from specviz.drafting import early_exit_model

    model, tok = run.smol()
    eos, dev, n = tok.eos_token_id, run.device, run.cfg.sweep_tokens
    L = run.cfg.draft_layers
    draft = early_exit_model(model, L)
    base = [ids for _, ids in run.prompts()]
    kw = dict(max_new_tokens=n, eos_token_id=eos)
    # warm-up (CUDA context, kernels, allocator) outside the measurements
    sv.autoregressive_generate_batch(model, base[:1], max_new_tokens=2, eos_token_id=eos)
    sv.speculative_generate_batch(model, draft, base[:1], gamma=2, max_new_tokens=2)
    table: dict[tuple[int, int], float] = {}
    try:
        for batch in run.cfg.batches:
            if table and run.over_cap(notes, f"batch {batch}"):
                break
            prompts = [base[i % len(base)] for i in range(batch)]
            plain0, t_before = _timed(
                lambda p=prompts: sv.autoregressive_generate_batch(model, p, **kw), dev
            )
            specs = {}
            for gamma in run.cfg.gammas:
                specs[gamma] = _timed(
                    lambda p=prompts, g=gamma: sv.speculative_generate_batch(
                        model, draft, p, gamma=g, **kw
                    ),
                    dev,
                )
            _, t_after = _timed(
                lambda p=prompts: sv.autoregressive_generate_batch(model, p, **kw), dev
            )
            t_plain = 0.5 * (t_before + t_after)
            n_plain = sum(len(s) for s in plain0.sequences)
            for gamma, (res, t_spec) in specs.items():
                n_spec = sum(len(s) for s in res.sequences)
                steps = sum(len(a) for a in res.accepted_counts)
                accepted = sum(sum(a) for a in res.accepted_counts)
                drafted = sum(sum(d) for d in res.drafted_counts)
                speedup = (n_spec / t_spec) / (n_plain / t_plain)
                table[(gamma, batch)] = speedup
                rows.append(
                    {
                        "batch": batch,
                        "gamma": gamma,
                        "draft": f"early_exit(L={L})",
                        "new_tokens": n_spec,
                        "spec_seconds": _r(t_spec, 5),
                        "plain_seconds": _r(t_plain, 5),
                        "plain_seconds_before": _r(t_before, 5),
                        "plain_seconds_after": _r(t_after, 5),
                        "spec_tokens_per_s": _r(n_spec / t_spec, 2),
                        "plain_tokens_per_s": _r(n_plain / t_plain, 2),
                        "speedup": _r(speedup),
                        "model_calls": res.model_calls,
                        "plain_model_calls": plain0.model_calls,
                        "mean_accepted_per_call": _r(accepted / steps if steps else None),
                        "acceptance_rate": _r(accepted / drafted if drafted else None),
                        "tokens_per_call": _r(
                            n_spec / res.model_calls if res.model_calls else None
                        ),
                        "rows_identical_to_plain": sum(
                            a == b for a, b in zip(res.sequences, plain0.sequences, strict=True)
                        ),
                    }
                )
                print(
                    f"  B={batch:3} gamma={gamma}: {n_spec / t_spec:8.1f} tok/s vs plain "
                    f"{n_plain / t_plain:8.1f} -> {speedup:.2f}x, {res.model_calls} calls, "
                    f"{rows[-1]['mean_accepted_per_call']} accepted/call",
                    flush=True,
                )
    finally:  # the table of what was measured, also after a timeout
        _speedup_table(table, run.cfg, L, notes)


def _speedup_table(table: dict, cfg: Config, L: int, notes: dict) -> None:
    print(f"\n  speedup over plain decoding at the same batch size (same run, early_exit L={L}):")
    lines = ["  gamma \\ batch " + "".join(f"{b:>8}" for b in cfg.batches)]
    for g in cfg.gammas:
        cells = "".join(
            f"{table[(g, b)]:8.2f}" if (g, b) in table else f"{'-':>8}" for b in cfg.batches
        )
        lines.append(f"  {g:>13} {cells}")
    print("\n".join(lines), flush=True)
    notes["speedup_table"] = {f"gamma={g},batch={b}": round(v, 4) for (g, b), v in table.items()}


# --------------------------------------------------------------------------- 4. static / compile


def static_compile(run: Run, rows: list[dict], notes: dict) -> None:
    import specviz as sv
    from specviz.core.runners import use_static_cache

    model, tok = run.smol()
    eos, dev, n = tok.eos_token_id, run.device, run.cfg.new_tokens
    prompts = [ids for _, ids in run.prompts()]
    kw = dict(max_new_tokens=n, eos_token_id=eos)
    systems: dict[str, Callable[[list[int]], list[int]]] = {
        "plain": lambda ids: sv.autoregressive_generate(model, ids, **kw).new_tokens,
        "spec_prompt_lookup": lambda ids: (
            sv.speculative_generate(
                model, sv.PromptLookupDrafter(), ids, gamma=4, trace=False, **kw
            ).new_tokens
        ),
    }
    compile_mode = "reduce-overhead" if dev.type == "cuda" else "default"
    modes: list[tuple[str, Callable[[], Any] | None, str]] = [
        ("eager", lambda: use_static_cache(model, None), ""),
        ("static", lambda: use_static_cache(model, 1024), ""),
    ]
    if (run.cfg.compile or run.args.compile) and not run.args.no_compile:
        modes.append(
            (
                "static+compile",
                lambda: use_static_cache(model, 1024, compile=True, mode=compile_mode),
                "",
            )
        )
    else:
        why = "--tiny skips torch.compile" if run.args.tiny else "--no-compile"
        modes.append(("static+compile", None, why))
        notes["skipped_parts"] = [f"static+compile: {why}"]
    notes["compile_mode"] = compile_mode
    reference: dict[str, list[list[int]]] = {}
    warm_tps: dict[tuple[str, str], float] = {}
    mismatches = []
    try:
        for mode, switch, why in modes:
            if switch is None:
                for system in systems:
                    rows.append(
                        {
                            "mode": mode,
                            "system": system,
                            "phase": "",
                            "repeat": "",
                            "status": "skipped",
                            "reason": why,
                        }
                    )
                print(f"  {mode}: skipped ({why})", flush=True)
                continue
            switch()
            for system, gen in systems.items():
                phases = [("first", 0)] + [("warm", r) for r in range(run.cfg.warm_repeats)]
                warm_total = [0.0, 0]
                for phase, rep in phases:
                    outs, took = _timed(lambda g=gen: [g(ids) for ids in prompts], dev)
                    ntok = sum(len(o) for o in outs)
                    if mode == "eager" and phase == "first":
                        reference[system] = outs
                    equal = outs == reference[system]
                    if not equal:
                        bad = [
                            i
                            for i, (a, b) in enumerate(zip(outs, reference[system], strict=True))
                            if a != b
                        ]
                        mismatches.append(f"{mode}/{system}/{phase}{rep}: prompts {bad}")
                    if phase == "warm":
                        warm_total[0] += took
                        warm_total[1] += ntok
                    rows.append(
                        {
                            "mode": mode,
                            "system": system,
                            "phase": phase,
                            "repeat": rep,
                            "status": "ok",
                            "reason": "",
                            "prompts": len(prompts),
                            "tokens": ntok,
                            "seconds": _r(took, 4),
                            "tokens_per_s": _r(ntok / took, 2),
                            "tokens_equal_eager": equal,
                        }
                    )
                    print(
                        f"  {mode:15} {system:19} {phase:5} {ntok:4} tokens in {took:7.2f} s "
                        f"= {ntok / took:8.1f} tok/s{'' if equal else '  TOKENS DIFFER'}",
                        flush=True,
                    )
                if warm_total[0] > 0:
                    warm_tps[(mode, system)] = warm_total[1] / warm_total[0]
            if mode == "static+compile":
                try:
                    from torch._dynamo.utils import counters

                    notes["dynamo_stats"] = {k: int(v) for k, v in counters["stats"].items()}
                except Exception:  # diagnostics only
                    pass
    finally:
        use_static_cache(model, None)
    ratios = {}
    for (mode, system), tps in warm_tps.items():
        if mode != "eager" and ("eager", system) in warm_tps:
            ratios[f"{mode}/{system}"] = round(tps / warm_tps[("eager", system)], 4)
    notes["warm_tokens_per_s"] = {f"{m}/{s}": round(v, 2) for (m, s), v in warm_tps.items()}
    notes["warm_ratio_vs_eager"] = ratios
    if ratios:
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        print(f"  warm tokens/s over eager (same run): {shown}", flush=True)
    if mismatches:
        raise CheckFailed("tokens differ from the eager dynamic cache: " + "; ".join(mismatches))


SECTION_FNS = {
    "greedy_identity": greedy_identity,
    "exact_law": exact_law,
    "gamma_batch": gamma_batch,
    "static_compile": static_compile,
}


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes everywhere (CPU smoke test)")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results/<gpu>)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="total time budget (default 420)")
    ap.add_argument("--sections", default="", help=f"comma list, subset of {','.join(SECTIONS)}")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile mode")
    ap.add_argument(
        "--compile", action="store_true", help="run the torch.compile mode even with --tiny"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (--tiny: 1)")
    args = ap.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: CUDA is not available (torch {torch.__version__}, cuda build "
            f"{torch.version.cuda}); for a CPU smoke test run --device cpu --tiny --out DIR",
            file=sys.stderr,
        )
        return 2
    threads = args.threads if args.threads is not None else (1 if args.tiny else None)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = TINY if args.tiny else FULL
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = "cpu-" + (platform.processor() or platform.machine())
    out = (
        Path(args.out)
        if args.out
        else HERE / "results" / _slug(name + ("-tiny" if args.tiny else ""))
    )
    out.mkdir(parents=True, exist_ok=True)
    run = Run(args, cfg, device, out)
    try:
        run.env.update(environment(device))
    except Exception as e:
        run.env["error"] = f"{type(e).__name__}: {e}"
    print(
        f"gpu_check on {name}: torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {run.env.get('transformers')}, specviz {run.env.get('specviz')}; "
        f"{'tiny' if args.tiny else 'full'} sizes, budget {run.budget:.0f} s -> {out}",
        flush=True,
    )
    warnings.filterwarnings("once")
    try:
        for section in SECTIONS:
            run.section(section, SECTION_FNS[section])
    finally:
        path = run.write_summary(finished=True)
    status = {k: v["status"] for k, v in run.sections.items()}
    print(f"\ndone in {run.elapsed():.1f} s: {status}\nwrote {path} and the CSVs in {out}")
    return 0 if all(s in ("ok", "skipped") for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
