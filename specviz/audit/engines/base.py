"""The in-process engine contract of ``specviz audit``: one small protocol, beside the HTTP
endpoint.

An :class:`Engine` samples ``n`` continuations of one prompt with given sampling settings and
one seed per request, and returns, per request, the token ids, the engine's own draft / accept
counts where it reports them, and the error when the request failed. Nothing else: the audit
(:mod:`specviz.audit.inprocess`) writes the raw file, resumes, tests and reports exactly as for
two HTTP endpoints.

Adapters (each a subclass with two methods, :meth:`Engine.load` and :meth:`Engine.sample_one`):
transformers ``generate`` (:mod:`.hf`), OpenVINO GenAI (:mod:`.openvino`) and
onnxruntime-genai (:mod:`.onnx`). :func:`engine_from_spec` builds one from a short spec such as
``"openvino:smollm2-135m,draft=smollm2-135m"``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import AuditError, Endpoint

__all__ = [
    "FAILED",
    "Engine",
    "EngineError",
    "EngineSample",
    "EngineUnavailable",
    "Sampling",
]

# The outcome a failed request contributes to the statistics: a crash is part of the
# engine's output law, never silently dropped.
FAILED = -1


class EngineError(AuditError):
    """An in-process engine cannot go on; the message names the engine and the cause."""


class EngineUnavailable(EngineError):
    """The engine's package is not installed (or cannot be imported)."""


@dataclass(frozen=True)
class Sampling:
    """What every request of one phase asks for, with transformers' meaning (temperature,
    then top-k, then top-p). ``temperature == 0`` is greedy decoding."""

    max_tokens: int
    temperature: float
    top_p: float | None = None
    top_k: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class EngineSample:
    """One request's result. ``error`` is set (and ``tokens`` empty) when it failed."""

    tokens: tuple[int, ...]
    seconds: float
    draft_tokens: int | None = None  # drafted tokens the engine verified, where it says
    draft_accepted: int | None = None  # of which accepted
    steps: int | None = None  # target verification steps, where known
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Engine:
    """Base class of the in-process adapters.

    ``spec`` is the engine's own description (what the raw file's key and the report show);
    ``label`` names the arm in messages. Subclasses set :attr:`engine` (the package's name, for
    error messages), :attr:`speculation` (``"off"``, ``"draft"``, ``"lookup"``, ...),
    :attr:`first_token_from_target` (True where the engine's first generated token never goes
    through its speculative path -- the audit's negative control) and
    :attr:`sampled_draft` (True where drafts are sampled from the draft model's law q and
    verified with min(1, p/q): with draft = target, a lossless engine then accepts every
    drafted token, also when sampling).
    """

    spec: str
    label: str = ""
    engine: str = "engine"
    speculation: str = "off"
    first_token_from_target: bool | None = None
    sampled_draft: bool | None = None
    lossy: bool = False  # a deliberately lossy mode (transformers' assistant_ensemble_weight)
    _loaded: bool = field(default=False, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.label or f"{self.engine}:{self.spec}"

    def ref(self) -> Endpoint:
        """The engine as the report's and raw file's identity (an Endpoint whose URL is the
        spec: one report design for HTTP and in-process engines)."""
        return Endpoint(f"{self.engine}:{self.spec}", model=None, label=self.name)

    # -- the two methods an adapter implements ------------------------------------------
    def load(self) -> None:  # pragma: no cover - every adapter overrides it
        """Import the engine's package and load the model(s); raise :class:`EngineError`
        (naming the engine and the cause) when it cannot."""
        raise NotImplementedError

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        """One request. Engine exceptions propagate; :meth:`sample` turns them into failed
        samples."""
        raise NotImplementedError  # pragma: no cover

    # -- what the audit calls ---------------------------------------------------------------
    def ensure_loaded(self) -> None:
        if not self._loaded:
            try:
                self.load()
            except EngineError:
                raise
            except Exception as err:  # noqa: BLE001 - any load failure is reported as such
                raise EngineError(
                    f"{self.engine} ({self.name}): loading {self.spec!r} failed: "
                    f"{type(err).__name__}: {err}"
                ) from err
            self._loaded = True

    def after_failure(self) -> None:
        """Called after a request failed; adapters whose state a failure may damage reload
        here (the next request then runs on a fresh pipeline)."""

    def sample(self, prompt: str, sampling: Sampling, seeds: Sequence[int]) -> list[EngineSample]:
        """``len(seeds)`` continuations of ``prompt``, one request per seed. A request that
        raises becomes a failed :class:`EngineSample` (its message kept)."""
        self.ensure_loaded()
        out = []
        for seed in seeds:
            t0 = time.perf_counter()
            message = None
            try:
                out.append(self.sample_one(prompt, sampling, int(seed)))
            except (KeyboardInterrupt, MemoryError):
                raise
            except Exception as err:  # noqa: BLE001 - a failed request is a finding
                message = f"{type(err).__name__}: {str(err).strip()[:500]}"
            if message is not None:
                # outside the except block: its traceback would keep the old pipeline alive
                out.append(EngineSample((), time.perf_counter() - t0, error=message))
                self.after_failure()
        return out

    def sample_in_chunks(self, prompt: str, sampling: Sampling, seeds: Sequence[int], run,
                         *, steps: bool = False) -> list[EngineSample]:  # fmt: skip
        """``seeds`` in chunks of ``self.batch``, one engine call per chunk: ``run(chunk)``
        returns each request's tokens, or None when the call failed -- then that chunk's
        requests run one at a time (:meth:`sample`), so the failing request is found and
        counted. Each request is charged an equal share of its chunk's time; ``steps``: one
        target step per token (plain decoding)."""
        self.ensure_loaded()
        out: list[EngineSample] = []
        for i in range(0, len(seeds), self.batch):
            chunk = [int(s) for s in seeds[i : i + self.batch]]
            t0 = time.perf_counter()
            rows = run(chunk)
            if rows is None:
                out += Engine.sample(self, prompt, sampling, chunk)
                continue
            each = (time.perf_counter() - t0) / len(chunk)
            out += [EngineSample(tuple(r), each, steps=len(r) if steps else None) for r in rows]
        return out

    def close(self) -> None:
        """Free the models (the audit calls it when done with this arm)."""


# settings that change an engine's numbers (or its weights), not its method
_NUMERICS = ("precision", "dtype", "weights")


def check_same_numerics(a: Engine, b: Engine) -> None:
    """Two arms of the same engine must compute at the same precision (OpenVINO's
    ``precision=``, onnxruntime-genai's ``precision=``, transformers' ``dtype=``): otherwise
    the audit measures the precision, not the speculation. ValueError before any model
    loads."""
    if a.engine != b.engine:
        return
    for key in _NUMERICS:
        va, vb = getattr(a, key, None), getattr(b, key, None)
        if va != vb:
            raise ValueError(
                f"{a.engine}: the two arms differ in {key} ({va or 'default'} vs "
                f"{vb or 'default'}): give both the same {key}= (it changes the engine's "
                "numerics, so the audit would measure it, not the speculation)"
            )


def check_sampling(engine: str, sampling: Sampling) -> None:
    if sampling.max_tokens < 1:
        raise ValueError(f"{engine}: max_tokens must be >= 1, got {sampling.max_tokens}")
    if not (math.isfinite(sampling.temperature) and sampling.temperature >= 0):
        raise ValueError(f"{engine}: temperature must be >= 0, got {sampling.temperature}")


def import_engine(module: str, engine: str, extra: str) -> Any:
    """Import an optional engine package, or raise :class:`EngineUnavailable` saying how to
    install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise EngineUnavailable(
            f"{engine} is not installed ({module}: {err}); install it with "
            f"pip install 'specviz[{extra}]'"
        ) from err
