"""``params: SamplingParams`` on every public decoding entry: the same run as the keywords,
a keyword that disagrees refused; and the one confidence-stop rule (serial == replay)."""

from __future__ import annotations

import pytest
import torch

import specviz as sv
from specviz.decoding import (
    autoregressive_generate,
    autoregressive_generate_batch,
    speculative_generate,
    speculative_generate_batch,
)
from specviz.drafting.model import ConfidenceStopDrafter, ModelDrafter
from specviz.drafting.modes import DraftStop
from specviz.drafting.policies import ConfidenceStop

PAIR = sv.toy_pair(7, 2, noise=1.0, seed=0)
PARAMS = sv.SamplingParams(True, 0.8, 5, 0.9)
KW = dict(do_sample=True, temperature=0.8, top_k=5, top_p=0.9)


def _runs(**sampling):
    target, draft = PAIR
    common = dict(max_new_tokens=12, seed=4, **sampling)
    return (
        autoregressive_generate(target, [1, 2], **common).new_tokens,
        speculative_generate(target, draft, [1, 2], gamma=3, **common).new_tokens,
        autoregressive_generate_batch(target, [1, 2], num_sequences=3, **common).sequences,
        speculative_generate_batch(
            target, draft, [1, 2], num_sequences=3, gamma=3, **common
        ).sequences,
    )


def test_params_is_the_same_run_as_the_keywords():
    from specviz.core.sampling import SamplingParams

    assert sv.SamplingParams is SamplingParams
    assert _runs(params=PARAMS) == _runs(**KW)
    # a keyword that agrees with params is fine
    assert _runs(params=PARAMS, temperature=0.8) == _runs(**KW)


@pytest.mark.parametrize(
    "entry",
    [
        lambda **kw: autoregressive_generate(PAIR[0], [1], max_new_tokens=2, **kw),
        lambda **kw: speculative_generate(*PAIR, [1], max_new_tokens=2, **kw),
        lambda **kw: autoregressive_generate_batch(PAIR[0], [1], max_new_tokens=2, **kw),
        lambda **kw: speculative_generate_batch(*PAIR, [1], max_new_tokens=2, **kw),
        lambda **kw: sv.consistency_check(*PAIR, [[1]], n_samples=4, max_new_tokens=1, **kw),
    ],
)
def test_a_conflicting_keyword_is_refused(entry):
    with pytest.raises(ValueError, match="temperature=0.5 disagree"):
        entry(params=PARAMS, temperature=0.5)
    with pytest.raises(TypeError, match="params must be a specviz.SamplingParams"):
        entry(params={"temperature": 0.8})


def test_consistency_check_refuses_greedy_params():
    with pytest.raises(ValueError, match="use greedy_check"):
        sv.consistency_check(
            *PAIR, [[1]], n_samples=4, max_new_tokens=1, params=sv.SamplingParams(False)
        )


def test_one_stop_rule_serial_and_replay_agree():
    """The serial drafter stops where the replay rule says, on the draft's own top probs."""
    target, draft = PAIR
    policy = ConfidenceStop(gamma=5, threshold=0.55, min_tokens=1)
    stop = policy.draft_stop()
    drafter = ConfidenceStopDrafter(ModelDrafter(draft), stop.threshold, stop.min_tokens)
    drafter.start(torch.tensor([1, 2]), PARAMS)
    context = torch.tensor([1, 2])
    proposed = drafter.propose(context, 5, torch.Generator().manual_seed(0))
    # the top probabilities the draft saw before each draw, recomputed
    runner, tops = draft.make_runner(), []
    logits = runner.extend(context, 1)[-1]
    for tok in [*proposed.tokens.tolist(), None]:
        tops.append(float(sv.logits_to_probs(logits, PARAMS).max()))
        if tok is not None:
            logits = runner.extend(torch.tensor([tok]), 1)[-1]
    assert proposed.tokens.numel() == policy.draft_length(5, tops) == 2  # the stop acted
    assert drafter.stopped_early == 1
    assert DraftStop(0.5, 2).halts(1, 0.1) is False  # min_tokens: position 1 is never judged
    assert DraftStop(0.5, 2).halts(2, 0.1) is True
