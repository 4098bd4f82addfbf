"""specviz: speculative decoding you can see and verify."""

from .batch import BatchResult, autoregressive_generate_batch, speculative_generate_batch
from .consistency import ConsistencyReport, GreedyReport, consistency_check, greedy_check
from .drafters import Draft, Drafter, EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from .engine import GenerationResult, autoregressive_generate, speculative_generate
from .packed import stock_linears, use_packed_weights
from .sampling import SamplingParams, logits_to_probs
from .toy import ToyLM, exact_continuation_law, toy_pair
from .trace import Trace, TraceFormatError
from .verify import VERIFIERS

__version__ = "0.1.0"

__all__ = [
    "BatchResult",
    "ConsistencyReport",
    "EarlyExitDrafter",
    "GreedyReport",
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
    "Trace",
    "TraceFormatError",
    "VERIFIERS",
    "autoregressive_generate",
    "exact_continuation_law",
    "logits_to_probs",
    "speculative_generate",
    "stock_linears",
    "toy_pair",
    "use_packed_weights",
]
