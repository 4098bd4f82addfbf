"""specviz.audit.planning and scripts/draft_tv05_prompt.py's choice (no model: fixed laws, the
exact plan they give). Seconds."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from specviz import stats
from specviz.audit import planning

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "draft_tv05_prompt.py"
_spec = importlib.util.spec_from_file_location("draft_tv05_prompt", _PATH)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)

# vocabulary of 4 tokens: target p, draft q
P1 = np.array([0.6, 0.3, 0.1, 0.0])
Q1 = np.array([0.2, 0.7, 0.0, 0.1])
FIRST = [0, 1]  # expanded first tokens (0.9 of p1: token 2 is uncovered)
P2 = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
Q2 = np.array([[0.5, 0.25, 0.25, 0.0], [0.0, 0.0, 0.5, 0.5]])


def plan(p1=P1, q1=Q1, first=FIRST, p2=P2, q2=Q2, **kw):
    return planning.draft_plan(p1, q1, first, p2, q2, decode=lambda t: "abcd"[t], **kw)


def test_draft_plan_from_fixed_laws_is_exact():
    row = plan()
    # acceptance of a drafted token: sum min(p, q) at position 1; at position 2 weighted by p1
    assert row["predicted_accept_pos1"] == pytest.approx(0.2 + 0.3)
    assert row["predicted_accept_pos2"] == pytest.approx(0.6 * 0.75 + 0.3 * 0.5)
    assert row["tv_pq_pos1"] == pytest.approx(0.5)
    assert row["uncovered"] == pytest.approx(0.1)
    # the law of the first two tokens, likeliest first: a a, a b (0.3 each), b c (0.3)
    assert [o for o, _ in row["first_two"]] == [["a", "a"], ["a", "b"], ["b", "c"]]
    assert [p for _, p in row["first_two"]] == pytest.approx([0.3, 0.3, 0.3])
    assert row["first_token"][0] == ["a", 0.6, 0.2]
    # sizes on the binned law: three outcomes and the uncovered mass as a fourth bin
    law2 = np.array([0.3, 0.3, 0.3, 0.1])
    assert row["position2"]["outcomes"] == 4
    want = stats.sample_size_for_tv(law2, 0.05, alpha=0.01, power=0.9, two_sample=True)
    assert row["position2"]["n_head-tail"] == want
    assert want == 3763  # the exact plan these laws give
    want1 = stats.sample_size_for_tv(
        np.array([0.6, 0.3, 0.1]), 0.05, alpha=0.01, power=0.9, two_sample=True
    )
    assert row["position1"] == {**row["position1"], "outcomes": 3, "n_head-tail": want1}
    assert planning.planned_size(row["position2"]["n_head-tail"]) == 4350  # 1.15 x, up to 50


def test_binned_pools_beyond_max_bins_with_the_uncovered_mass():
    two = [(("a", "a"), 0.5), (("a", "b"), 0.3), (("b", "a"), 0.15), (("b", "b"), 0.04)]
    law = planning.binned(two, 0.01, max_bins=2)
    assert law == pytest.approx([0.5, 0.3, 0.2])
    # without a cap the old behaviour (tv05_prompt.py): every outcome and the uncovered bin
    assert planning.binned(two, 0.01) == pytest.approx([0.5, 0.3, 0.15, 0.04, 0.01])
    # rounding residue is not a bin, capped or not
    assert planning.binned(two[:2], 1e-9, max_bins=5).size == 2
    with pytest.raises(ValueError, match="max_bins"):
        planning.binned(two, 0.0, max_bins=0)


def test_draft_plan_caps_bins_as_the_audit_does():
    # 300 equally likely second tokens after one first token: 200 bins and a tail of 100/300
    v = 300
    p1 = np.zeros(v)
    p1[0] = 1.0
    p2 = np.full((1, v), 1.0 / v)
    row = planning.draft_plan(p1, p1, [0], p2, p2)
    assert row["position2"]["outcomes"] == 201
    assert row["predicted_accept_pos1"] == pytest.approx(1.0)
    assert row["predicted_accept_pos2"] == pytest.approx(1.0)


def test_draft_plan_refuses_inconsistent_laws():
    with pytest.raises(ValueError, match="one row per first token"):
        plan(first=[0])
    with pytest.raises(ValueError, match="distinct"):
        plan(first=[0, 0])
    with pytest.raises(ValueError, match="same vocabulary"):
        plan(q1=Q1[:3])
    with pytest.raises(ValueError, match="no finite size"):
        planning.planned_size(math.inf)


def test_simulated_statement_matches_the_analytic_one_on_a_small_law():
    # two outcomes, every one seen: the statement on the samples' law is close to the true one
    law = np.array([0.7, 0.3])
    n = 2500
    sim = planning.simulated_statement(law, 0.0, n, reps=40, seed=1)
    exact = stats.min_detectable_tv(law, n, two_sample=True)
    assert np.median(sim) == pytest.approx(exact, rel=0.03)
    # the same seed gives the same simulated reports
    again = planning.simulated_statement(law, 0.0, n, reps=40, seed=1)
    assert np.array_equal(sim, again)


def test_simulated_statement_sees_singletons_as_outcomes_of_their_own():
    # half the mass on outcomes seen once each: the report bins 200 and pools the rest, so its
    # statement differs from the one on the two named outcomes alone
    law = np.array([0.35, 0.15])
    with_tail = planning.simulated_statement(law, 0.5, 1000, reps=5, seed=0)
    alone = planning.simulated_statement(law / law.sum(), 0.0, 1000, reps=5, seed=0)
    assert np.all(np.isfinite(with_tail))
    assert not np.allclose(with_tail, alone)


def _row(prompt, accept1, accept2, n, outcomes=3, uncovered=0.0):
    return {
        "prompt": prompt,
        "predicted_accept_pos1": accept1,
        "predicted_accept_pos2": accept2,
        "uncovered": uncovered,
        "position2": {"outcomes": outcomes, "n_head-tail": n},
    }


def test_choice_takes_the_smallest_size_where_speculation_acts():
    rows = [
        _row("never accepted", 0.001, 0.3, 500.0),  # smallest n, but speculation idle at 1
        _row("always accepted", 0.5, 0.995, 600.0),  # never rejected at position 2
        _row("one outcome", 0.5, 0.5, 700.0, outcomes=1),
        _row("bound crosses", 0.5, 0.95, 800.0, uncovered=0.05),  # 0.95 + 0.05 > 0.98
        _row("ok but large", 0.3, 0.3, 3000.0),
        _row("ok", 0.29, 0.29, 2504.0),
    ]
    assert script.choose(rows)["prompt"] == "ok"
    assert planning.planned_size(script.choose(rows)["position2"]["n_head-tail"]) == 2900


def test_choice_is_none_when_no_candidate_lets_speculation_act():
    # the negative case: a draft equal to the target (acceptance 1) and a useless one (0)
    same = plan(q1=P1, q2=P2) | {"prompt": "identity"}
    assert same["predicted_accept_pos1"] == pytest.approx(1.0)
    useless = plan(
        q1=np.array([0.0, 0.0, 0.0, 1.0]), q2=np.array([[0, 0, 0, 1.0], [0, 0, 0, 1.0]])
    ) | {"prompt": "useless"}
    assert useless["predicted_accept_pos1"] == 0.0
    assert useless["predicted_accept_pos2"] == 0.0
    assert script.choose([same, useless]) is None
    # the fixed laws above do qualify (acceptance 0.5 / 0.6 + uncovered 0.1 <= 0.98)
    assert script.choose([same, useless, plan() | {"prompt": "x"}])["prompt"] == "x"


class _FixedLogits:
    """A stand-in causal LM whose next-token logits are the same after any prefix."""

    def __init__(self, logits):
        import torch

        self.logits = torch.tensor(logits, dtype=torch.float32)

    def __call__(self, input_ids):
        from types import SimpleNamespace

        rows, length = input_ids.shape
        return SimpleNamespace(logits=self.logits.expand(rows, length, -1))


def test_next_token_laws_top_k_keeps_the_k_likeliest_and_renormalises():
    import torch

    model = _FixedLogits([2.0, 0.0, 1.0, -1.0, 1.0])
    ids = torch.tensor([[0, 1]])
    full, _ = planning.next_token_laws(model, ids)
    law1, law2 = planning.next_token_laws(model, ids, [3, 4], top_k=2)
    # the 2 likeliest logits are 2.0 and 1.0 -- the tie at 1.0 keeps both tokens 2 and 4,
    # as transformers' top-k keeps ties at the k-th value
    kept = full[[0, 2, 4]] / full[[0, 2, 4]].sum()
    np.testing.assert_allclose(law1[[0, 2, 4]], kept)
    assert law1[[1, 3]].sum() == 0.0
    np.testing.assert_allclose(law2, np.vstack([law1, law1]))
    # no cut: the plain softmax (the negative control: top_k changes the law)
    np.testing.assert_allclose(full, torch.softmax(model.logits, -1).double().numpy(), rtol=1e-6)
    assert np.abs(full - law1).sum() > 0.1
    with pytest.raises(ValueError, match="top_k"):
        planning.next_token_laws(model, ids, top_k=0)
