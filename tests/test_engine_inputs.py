"""Bad input is a clear error, never a silent wrong answer."""

from __future__ import annotations

import pytest
import torch

import specviz as sv
from specviz.fixtures.toy import ToyLM

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)


def spec(**kw):
    args = dict(gamma=2, max_new_tokens=4, seed=0)
    args.update(kw)
    prompt = args.pop("prompt", [0, 1])
    draft = args.pop("draft", DRAFT)
    return sv.speculative_generate(TARGET, draft, prompt, **args)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(gamma=0), "gamma must be an integer >= 1"),
        (dict(gamma=1.5), "gamma must be an integer >= 1"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(do_sample=True, temperature=0.0), "temperature must be a finite number > 0"),
        (dict(do_sample=True, temperature=-1.0), "temperature must be a finite number > 0"),
        (dict(do_sample=True, temperature=float("nan")), "temperature"),
        (dict(do_sample=True, top_p=0.0), r"top_p must be in \(0, 1\]"),
        (dict(do_sample=True, top_p=1.5), r"top_p must be in \(0, 1\]"),
        (dict(do_sample=True, top_k=0), "top_k must be an integer >= 1"),
        (dict(do_sample=True, top_k=-3), "top_k must be an integer >= 1"),
        (dict(prompt=[]), "input_ids is empty"),
        (dict(prompt=torch.zeros(2, 3, dtype=torch.long)), "single sequence"),
        (dict(prompt=torch.zeros(1, 3)), "integer token ids"),
        (dict(prompt="hello"), "tensor or a list of ints"),
        (dict(verifier="nope"), "unknown verifier 'nope'"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        spec(**kwargs)


def test_baseline_validates_the_same_way():
    with pytest.raises(ValueError, match="temperature"):
        sv.autoregressive_generate(TARGET, [0], max_new_tokens=2, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="empty"):
        sv.autoregressive_generate(TARGET, [], max_new_tokens=2)


def test_greedy_ignores_temperature_like_transformers():
    a = spec(temperature=0.0)  # do_sample=False: temperature is not used
    b = spec()
    assert a.new_tokens == b.new_tokens


def test_vocab_mismatch_between_draft_and_target_is_refused():
    draft6 = ToyLM.random(6, 2, seed=3)
    with pytest.raises(
        ValueError, match="vocabulary mismatch: draft logits have 6 entries, target logits 5"
    ):
        spec(draft=draft6, do_sample=True)


def test_nan_logits_are_refused():
    table = TARGET.table.clone()
    table[:, 2] = float("nan")
    broken = ToyLM(table, 5, 2)
    with pytest.raises(FloatingPointError, match="target produced non-finite logits"):
        sv.speculative_generate(
            broken, DRAFT, [0], gamma=2, max_new_tokens=3, do_sample=True, seed=0
        )
    with pytest.raises(FloatingPointError, match="non-finite"):
        sv.autoregressive_generate(broken, [0], max_new_tokens=2)


def test_drafter_reporting_zero_q_for_its_token_is_refused():
    class Liar:
        def propose(self, context, k, generator):
            q = torch.zeros(k, 5)
            q[:, 0] = 1.0
            return sv.Draft(torch.full((k,), 3), q)  # claims q(3) = 0 yet proposes 3

        def feedback(self, n):
            pass

    with pytest.raises(ValueError, match="has q_draft = 0"):
        spec(draft=Liar(), do_sample=True)


def test_eos_stops_and_max_new_tokens_is_exact():
    for seed in range(20):
        r = spec(max_new_tokens=7, do_sample=True, seed=seed, gamma=3)
        assert len(r.new_tokens) == 7
        r = spec(max_new_tokens=7, do_sample=True, seed=seed, gamma=3, eos_token_id=4)
        assert len(r.new_tokens) == 7 or (r.new_tokens[-1] == 4 and 4 not in r.new_tokens[:-1])


def test_zero_new_tokens():
    r = spec(max_new_tokens=0)
    assert r.new_tokens == [] and r.target_calls == 0
