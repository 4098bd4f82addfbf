"""scripts/tv05_prompt.py's sizing (no server, no model): the law of the first two tokens built
from per-token laws, and the sample size on it. Seconds."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "tv05_prompt.py"
_spec = importlib.util.spec_from_file_location("tv05_prompt", _PATH)
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)


def test_two_token_law_is_the_product_of_the_per_token_laws():
    law1 = {1: ("a", 0.8), 2: ("b", 0.2)}
    law2 = {1: {5: (",", 0.75), 6: ("0", 0.25)}, 2: {5: (",", 1.0)}}
    two, uncovered = plan.two_token_law(law1, law2)
    assert dict(two) == pytest.approx({("a", ","): 0.6, ("a", "0"): 0.2, ("b", ","): 0.2})
    assert uncovered == 0.0
    # a first token left out (below MIN_P1) is uncovered mass
    two, uncovered = plan.two_token_law(law1, {1: law2[1]})
    assert uncovered == pytest.approx(0.2)


def test_rounding_residue_is_not_an_outcome():
    # two outcomes whose probabilities sum to 1 - 3e-8 (float rounding): the residue must not
    # become a third bin -- as a bin it is the head-tail alternative's whole tail and makes a
    # few hundred samples look enough (the negative control: the same law with the residue
    # binned needs far fewer samples than the two-outcome law really does)
    two = [(("a", ","), 0.70664), (("a", "\n"), 0.29336 - 3e-8)]
    law = plan.binned(two, 3e-8)
    assert law.size == 2
    n = plan.sizes(law)
    assert n["n_head-tail"] == n["n_least-favourable"]  # two outcomes: the same alternative
    assert 2000 < n["n_head-tail"] < 3200
    import numpy as np

    wrong = plan.sizes(np.array([0.70664, 0.29336 - 3e-8, 3e-8]))
    assert wrong["n_head-tail"] < 0.5 * n["n_head-tail"]
    # real uncovered mass stays a bin
    assert plan.binned(two, 0.01).size == 3
    assert math.isclose(plan.binned(two, 0.01).sum(), 1.0)
