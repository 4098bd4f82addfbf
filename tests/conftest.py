"""Shared fixtures: the built-in SmolLM2-135M model and a memoising wrapper for law tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) for SmolLM2-135M-Instruct, fp32 CPU, from the built-in GGUF."""
    from specviz.models import load_model, load_tokenizer

    return load_model("smollm2-135m", progress=False), load_tokenizer("smollm2-135m")


class MemoLM:
    """A causal LM whose next-token logits are memoised by prefix.

    Law tests draw thousands of 2-token continuations from one prompt; the distinct prefixes
    number in the hundreds, so memoising turns hours of forward passes into seconds while
    the engine under test runs unchanged (it sees an ordinary runner).
    """

    def __init__(self, model, base: MemoLM | None = None, noise: torch.Tensor | None = None):
        self.model = model
        self.base = base  # a noisy copy shares its base's memo and adds ``noise``
        self.noise = noise
        self.device = torch.device("cpu")
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}

    def noisy_copy(self, sigma: float, seed: int = 0) -> MemoLM:
        """A draft that is this model plus fixed per-token logit noise: real vocabulary and
        real conditional laws, agreement set by ``sigma`` (sigma=1 gives beta ~ 0.7 at T=1)."""
        vocab = self.model.config.vocab_size
        noise = torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * sigma
        return MemoLM(self.model, base=self, noise=noise)

    @torch.inference_mode()
    def next_logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        if self.base is not None:
            return self.base.next_logits(prefix) + self.noise
        hit = self.memo.get(prefix)
        if hit is None:
            ids = torch.tensor([prefix])
            hit = self.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
            self.memo[prefix] = hit
        return hit

    def make_runner(self):
        return MemoRunner(self)


class MemoRunner:
    def __init__(self, lm: MemoLM) -> None:
        self.lm = lm
        self.device = lm.device
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens = []

    def extend(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.tokens.extend(int(t) for t in tokens.tolist())
        n = len(self.tokens)
        return torch.stack(
            [
                self.lm.next_logits(tuple(self.tokens[:end]))
                for end in range(n - num_logits + 1, n + 1)
            ]
        )

    def crop(self, length: int) -> None:
        del self.tokens[length:]


@pytest.fixture(scope="session")
def memo_pair(smollm2):
    """(target, draft) memoised: SmolLM2 and a noisy copy of it (untrained early exits of
    SmolLM2 agree with it almost nowhere, beta ~ 0, which would leave the accept path idle)."""
    target = MemoLM(smollm2[0])
    return target, target.noisy_copy(1.0)
