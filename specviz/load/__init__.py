"""Serving under load: requests arrive, queue, and are batched into the engine.

A load generator for the question of claim 4 -- *does speculation still pay when the server
is busy?* -- answered by measurement. Requests (prompts of ``data/prompts.jsonl``) arrive
either as a seeded Poisson process at a given rate (open loop) or from a fixed number of
clients that each send their next request as soon as the previous one is answered (closed
loop, "concurrency"). A single server takes up to ``max_batch`` waiting requests, runs them
as one batch through :func:`specviz.speculative_generate_batch` (speculation on) or
:func:`specviz.autoregressive_generate_batch` (off), and records for every request the time
to first token (queueing included), the inter-token gaps and the completion time.

**Two clocks, kept apart.** What the engine does is *measured*: every batch really runs, and
its service time and each row's token times are wall-clock readings (``perf_counter``).
Arrivals, the queue and the server clock are *virtual*: the server clock advances by the
measured service time of each batch and jumps over idle gaps straight to the next arrival,
so a sweep never sleeps. Because one server runs one batch at a time, a batch's service time
does not depend on when it started, and splicing measured service times into a simulated
timeline gives the latencies a real single-stream server would see -- except for the cost of
the bookkeeping itself and for interference from other processes on the machine.

**Scheduling is static batching.** A batch is formed from the requests waiting when the
server becomes free; finished rows leave the batch (the engine compacts them away) but new
requests cannot join a running batch: they wait for the whole batch to finish. Production
servers (vLLM, TGI, SGLang) use *continuous* batching, which admits requests at every step;
static batching gives longer queueing delays at medium load and so overstates TTFT there.
Both schedulers share the effect this module measures: at a large batch each model call is
already compute-bound, so the extra draft work and the wider verify pass of speculation stop
being free.

Common random numbers: every load level of a sweep uses the same unit-rate arrival gaps
(scaled by 1/rate) and the same prompt order, and both modes see the identical workload, so
differences between levels and modes are not sampling noise of the workload.

>>> from specviz.load import fixed_engine, serve
>>> eng = fixed_engine(tokens=4, step_time=0.25)  # a fake engine: 4 tokens, 0.25 s apart
>>> res = serve(eng, [[1, 2, 3]], concurrency=2, n_requests=4, max_batch=2, progress=False)
>>> [round(r.ttft, 2) for r in res.requests]
[0.25, 0.25, 0.25, 0.25]
>>> round(res.summary()["throughput_tok_s"], 2)
8.0
"""

from __future__ import annotations

from .claims import (
    ClaimVerdict,
    LoadDecision,
    call_split,
    claim1_verdict,
    claim4_verdict,
    claim5_verdict,
    claim12_verdict,
    describe_fallback,
    fallback_batch,
    load_decisions,
    pays_up_to,
    plain_step_note,
)
from .engines import BatchEngine, ServedBatch, fixed_engine, make_engine
from .records import BatchRecord, LoadResult, RequestRecord
from .serve import serve
from .sweeps import (
    Crossover,
    LoadSweep,
    accounting_line,
    batch_crossover,
    batch_sweep,
    find_crossover,
    load_sweep,
    plain_fell,
    served_alone,
)
from .workload import (
    LOWER_IS_BETTER,
    LoadPrompt,
    Request,
    load_prompts_for,
    mixed_prompts,
    poisson_arrivals,
)

__all__ = [
    "BatchEngine",
    "BatchRecord",
    "ClaimVerdict",
    "Crossover",
    "LOWER_IS_BETTER",
    "LoadDecision",
    "LoadPrompt",
    "LoadResult",
    "LoadSweep",
    "Request",
    "RequestRecord",
    "ServedBatch",
    "accounting_line",
    "batch_crossover",
    "batch_sweep",
    "call_split",
    "claim12_verdict",
    "claim1_verdict",
    "claim4_verdict",
    "claim5_verdict",
    "describe_fallback",
    "fallback_batch",
    "pays_up_to",
    "plain_step_note",
    "plain_fell",
    "find_crossover",
    "fixed_engine",
    "load_prompts_for",
    "load_decisions",
    "load_sweep",
    "make_engine",
    "mixed_prompts",
    "poisson_arrivals",
    "serve",
    "served_alone",
]
