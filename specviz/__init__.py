"""specviz: speculative decoding you can see and verify."""

from .checks import ConsistencyReport, GreedyReport, consistency_check, greedy_check
from .core.kernels import KernelReport, use_fastest_kernels
from .core.packed import stock_linears, use_packed_weights
from .core.sampling import SamplingParams, logits_to_probs
from .core.trace import Trace, TraceFormatError
from .decoding import (
    BatchResult,
    GenerationResult,
    autoregressive_generate,
    autoregressive_generate_batch,
    speculative_generate,
    speculative_generate_batch,
)
from .drafting import (
    CrossVocabDrafter,
    Draft,
    Drafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    TreeDraft,
    TreeDrafter,
)
from .fixtures.toy import ToyLM, exact_continuation_law, toy_pair
from .verification import VERIFIERS

__version__ = "0.1.0"

__all__ = [
    "BatchResult",
    "ConsistencyReport",
    "CrossVocabDrafter",
    "EarlyExitDrafter",
    "GreedyReport",
    "KernelReport",
    "autoregressive_generate_batch",
    "consistency_check",
    "greedy_check",
    "speculative_generate_batch",
    "Draft",
    "Drafter",
    "GenerationResult",
    "ModelDrafter",
    "PromptLookupDrafter",
    "SamplingParams",
    "ToyLM",
    "TreeDraft",
    "TreeDrafter",
    "Trace",
    "TraceFormatError",
    "VERIFIERS",
    "autoregressive_generate",
    "exact_continuation_law",
    "logits_to_probs",
    "speculative_generate",
    "stock_linears",
    "toy_pair",
    "use_fastest_kernels",
    "use_packed_weights",
]
