"""The audit's sampling phase (:mod:`specviz.audit.run`, step 2): the resumable raw file, the
engines' counters around each phase, and bounded concurrent requests with a progress bar."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .client import AuditError, Completion, Endpoint, complete
from .config import _SEED_ARM, _SEED_PROMPT, ARMS, AuditConfig
from .counters import EngineCounters, EngineSnapshot, counter_delta, fetch_snapshot
from .counters import response_counters as _response_counters
from .rawfile import load_raw

# ------------------------------------------------------------------------------ raw results


@dataclass
class _Raw:
    """The resumable JSONL file: one header line, then one line per complete result."""

    path: Path | None
    samples: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)
    greedy: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path | None, key: str, cfg: AuditConfig | None = None) -> _Raw:
        raw = cls(path)
        if path is None:
            return raw
        if path.exists() and path.stat().st_size:
            for rec in load_raw(path, key, cfg):  # damaged lines are set aside and redone
                raw._index(rec)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"kind": "header", "key": key}) + "\n", encoding="utf-8")
        return raw

    def _index(self, rec: dict[str, Any]) -> None:
        if rec["kind"] == "sample":
            self.samples[(rec["arm"], rec["prompt"], rec["index"])] = rec
        elif rec["kind"] == "greedy":
            self.greedy[(rec["arm"], rec["prompt"])] = rec

    def add(self, rec: dict[str, Any]) -> None:
        self._index(rec)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")


def _record(kind: str, arm: str, prompt: int, index: int, seed: int | None, c: Completion):
    return {
        "kind": kind,
        "arm": arm,
        "prompt": prompt,
        "index": index,
        "seed": seed,
        "tokens": list(c.tokens),
        "logprobs": list(c.logprobs),
        "top": list(c.top) if kind == "greedy" else None,
        "finish_reason": c.finish_reason,
        "seconds": round(c.seconds, 5),
        "draft_n": c.draft_tokens,
        "draft_n_accepted": c.draft_accepted,
        "completion_tokens": c.completion_tokens,
        # tokens whose logprob came without the requested alternatives: the server did not
        # compute it (llama.cpp's speculative path reports 0.0 for them)
        "unreported": sum(1 for t in c.top if not t) if c.logprobs else 0,
    }


@dataclass
class _Counters:
    """Engine counters (snapshot differences) and the audit's own per-response draft counts,
    per arm and phase, for the requests this run sent."""

    engine: dict[str, dict[str, EngineCounters]] = field(default_factory=dict)
    own: dict[str, dict[str, list[tuple[int | None, int | None]]]] = field(default_factory=dict)

    def put(self, arm: str, phase: str, before: EngineSnapshot, after: EngineSnapshot) -> None:
        self.engine.setdefault(arm, {})[phase] = counter_delta(before, after)

    def note(self, arm: str, phase: str, draft: tuple[int | None, int | None]) -> None:
        self.own.setdefault(arm, {}).setdefault(phase, []).append(draft)

    def own_summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for arm, phases in self.own.items():
            for phase, pairs in phases.items():
                summary = _response_counters([p[0] for p in pairs], [p[1] for p in pairs])
                if summary:
                    out.setdefault(arm, {})[phase] = summary
        return out


async def _snapshot(ep: Endpoint) -> EngineSnapshot:
    async with ep.client(concurrency=1) as client:
        return await fetch_snapshot(client, ep.metrics_endpoint())


async def _gather_bounded(jobs: list, concurrency: int, desc: str, progress: bool) -> None:
    """Run coroutine factories ``concurrency`` at a time; the first failure cancels the rest
    (what finished is already on disk)."""
    if not jobs:
        return
    queue: asyncio.Queue = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    bar = tqdm(total=len(jobs), desc=desc, unit="req", disable=not progress, leave=False)

    async def worker() -> None:
        while not queue.empty():
            job = queue.get_nowait()
            await job()
            bar.update(1)

    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(jobs)))]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in pending:
            t.cancel()
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        for t in tasks:
            t.cancel()
        bar.close()


async def _sample_arm(
    cfg: AuditConfig,
    arm: str,
    ep: Endpoint,
    raw: _Raw,
    progress: bool,
    greedy_lp: bool,
    counters: _Counters,
) -> None:
    lp = 1 if cfg.outcome == "tokens" else None
    samples_phase = f"samples T={cfg.temperature:g}"
    async with ep.client(concurrency=cfg.concurrency) as client:
        jobs = []
        for pi, prompt in enumerate(cfg.prompts):
            for j in range(cfg.n_samples):
                if (arm, pi, j) in raw.samples:
                    continue
                seed = cfg.seed + ARMS.index(arm) * _SEED_ARM + pi * _SEED_PROMPT + j

                async def job(pi=pi, prompt=prompt, j=j, seed=seed) -> None:
                    c = await complete(
                        client,
                        ep,
                        prompt,
                        max_tokens=cfg.max_tokens,
                        temperature=cfg.temperature,
                        top_p=cfg.top_p,
                        top_k=cfg.top_k,
                        seed=seed,
                        logprobs=lp,
                        retries=cfg.retries,
                        api=cfg.api,
                    )
                    raw.add(_record("sample", arm, pi, j, seed, c))
                    counters.note(arm, samples_phase, (c.draft_tokens, c.draft_accepted))

                jobs.append(job)
        resumed = len(cfg.prompts) * cfg.n_samples - len(jobs)
        before = await _snapshot(ep)
        try:
            await _gather_bounded(jobs, cfg.concurrency, f"sampling {ep.name}", progress)
        except AuditError as err:
            have = sum(1 for k in raw.samples if k[0] == arm)
            raise AuditError(
                f"{err}\n({have} of {len(cfg.prompts) * cfg.n_samples} samples from "
                f"{ep.name} are complete and saved in {raw.path}; incomplete ones were not "
                f"counted; rerun the same command to resume ({resumed} were resumed this time))"
            ) from err
        after = await _snapshot(ep)
        if jobs:
            counters.put(arm, samples_phase, before, after)
        if not cfg.greedy:
            return
        gjobs = []
        for pi, prompt in enumerate(cfg.prompts):
            if (arm, pi) in raw.greedy:
                continue

            async def gjob(pi=pi, prompt=prompt) -> None:
                c = await complete(
                    client,
                    ep,
                    prompt,
                    max_tokens=cfg.greedy_max_tokens,
                    temperature=0.0,
                    seed=cfg.seed,
                    logprobs=2 if greedy_lp else None,
                    retries=cfg.retries,
                    api=cfg.api,
                )
                raw.add(_record("greedy", arm, pi, 0, None, c))
                counters.note(arm, "greedy T=0", (c.draft_tokens, c.draft_accepted))

            gjobs.append(gjob)
        await _gather_bounded(gjobs, cfg.concurrency, f"greedy {ep.name}", progress)
        if gjobs:
            counters.put(arm, "greedy T=0", after, await _snapshot(ep))


async def _sample(
    cfg: AuditConfig,
    eps: dict[str, Endpoint],
    raw: _Raw,
    progress: bool,
    greedy_lp: bool,
    counters: _Counters,
) -> None:
    """Both arms at once (interleaved in time, so slow drift of a shared machine hits both
    alike); the first failure stops both, what finished is on disk."""
    await asyncio.gather(
        *(_sample_arm(cfg, arm, eps[arm], raw, progress, greedy_lp, counters) for arm in ARMS)
    )
