"""The bug zoo's stated effect sizes hold on the engine itself.

``specviz.zoo.zoo_effects`` on ``stated_setting()`` states, per broken verifier, the exact TV
of the first emitted token and the samples a test needs for 90% power at alpha=0.01 (the table
in docs/bug_zoo.md). Here the engine (batched, real verifier code) produces those samples:

- each broken verifier is rejected in >= 15 of 20 seeded replicates at its stated size, one-
  and two-sample (if the 90% claim were true, fewer than 15 happens with probability 1.1%);
- the lossless rule, at the largest stated size, is rejected in <= 2 of 20 (probability of 3
  or more at alpha=0.01: 0.1%) -- the negative control that the sizes are not just "large";
- the exact first-token law of every verifier matches the engine (GOF against the bug's own
  law, alpha=1e-3 each), so the stated TVs describe what the code does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specviz.decoding import autoregressive_generate_batch, speculative_generate_batch
from specviz.effects.zoo import first_token_law, stated_setting, zoo_effects
from specviz.stats import goodness_of_fit, homogeneity
from specviz.verification import VERIFIERS

TARGET, DRAFT, CONTEXT, PARAMS = stated_setting()
T_LOGITS, D_LOGITS = TARGET.next_logits(CONTEXT), DRAFT.next_logits(CONTEXT)
EFFECTS = zoo_effects(T_LOGITS, D_LOGITS, PARAMS)
P_TARGET = first_token_law("lossless", T_LOGITS, D_LOGITS, PARAMS)
BROKEN = [v for v in EFFECTS.index if not EFFECTS.loc[v, "lossless"]]
SAMPLING = dict(
    do_sample=True, temperature=PARAMS.temperature, top_k=PARAMS.top_k, top_p=PARAMS.top_p
)
R, ALPHA = 20, 0.01


pytestmark = pytest.mark.usefixtures("one_thread")


def _counts(seqs) -> np.ndarray:
    return np.bincount([s[0] for s in seqs], minlength=TARGET.vocab_size)


def _speculative(verifier: str, n: int, seed: int) -> np.ndarray:
    # max_new_tokens=2 so that the first token is drafted (one slot left = no draft)
    res = speculative_generate_batch(
        TARGET,
        DRAFT,
        list(CONTEXT),
        num_sequences=n,
        gamma=1,
        max_new_tokens=2,
        seed=seed,
        verifier=verifier,
        **SAMPLING,
    )
    return _counts(res.sequences)


def _standard(n: int, seed: int) -> np.ndarray:
    res = autoregressive_generate_batch(
        TARGET, list(CONTEXT), num_sequences=n, max_new_tokens=1, seed=seed, **SAMPLING
    )
    return _counts(res.sequences)


def test_the_stated_table_is_complete_and_sane():
    assert set(EFFECTS.index) == {v for v in VERIFIERS if VERIFIERS[v].tree_sampling is None} - {
        "greedy"
    }
    assert EFFECTS.loc["lossless", "tv"] == 0.0
    assert math.isinf(EFFECTS.loc["lossless", "n_one_sample"])
    for v in BROKEN:  # every bug is visible on this toy, and at a size a test can afford
        assert EFFECTS.loc[v, "tv"] > 0.02, v
        assert EFFECTS.loc[v, "n_two_sample"] <= 5000, v


@pytest.mark.parametrize("verifier", BROKEN)
def test_caught_at_its_stated_sample_size(verifier):
    n1 = int(EFFECTS.loc[verifier, "n_one_sample"])
    n2 = int(EFFECTS.loc[verifier, "n_two_sample"])
    one = sum(
        goodness_of_fit(_speculative(verifier, n1, seed=1000 * r), P_TARGET).pvalue < ALPHA
        for r in range(R)
    )
    two = sum(
        homogeneity(
            _speculative(verifier, n2, seed=1000 * r + 7), _standard(n2, seed=1000 * r + 8)
        ).pvalue
        < ALPHA
        for r in range(R)
    )
    assert one >= 15 and two >= 15, (verifier, n1, one, n2, two)


def test_lossless_is_not_rejected_at_the_largest_stated_size():
    n = int(EFFECTS.loc[BROKEN, "n_two_sample"].max())
    one = sum(
        goodness_of_fit(_speculative("lossless", n, seed=50_000 + r), P_TARGET).pvalue < ALPHA
        for r in range(R)
    )
    two = sum(
        homogeneity(_speculative("lossless", n, seed=60_000 + r), _standard(n, 70_000 + r)).pvalue
        < ALPHA
        for r in range(R)
    )
    assert one <= 2 and two <= 2, (n, one, two)


@pytest.mark.parametrize("verifier", ["lossless", *BROKEN])
def test_the_exact_law_is_what_the_engine_does(verifier):
    law = first_token_law(verifier, T_LOGITS, D_LOGITS, PARAMS)
    counts = _speculative(verifier, 10_000, seed=123)
    assert goodness_of_fit(counts, law).pvalue > 1e-3
