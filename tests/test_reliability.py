"""Every bad-input class of docs/reliability.md gives its one clear message, on every path
(serial, batched, consistency_check, greedy_check, the load generator), before the target
model runs. The table in docs/reliability.md names these tests."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import specviz as sv
from specviz.checks import consistency_check, greedy_check
from specviz.decoding import speculative_generate_batch
from specviz.drafting import Draft, Drafter, ModelDrafter
from specviz.fixtures.llamas import tiny_llama
from specviz.fixtures.toy import ToyLM
from specviz.load import make_engine

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)


class CountingToy(ToyLM):
    """A toy target that counts its forward passes (to prove checks run before it)."""

    def __init__(self, base: ToyLM) -> None:
        super().__init__(base.table, base.vocab_size, base.order)
        self.calls = 0

    def next_logits(self, context):
        self.calls += 1
        return super().next_logits(context)


class Bad(Drafter):
    name = "bad"

    def __init__(self, tokens, q=None) -> None:
        self.tokens, self.q = tokens, q

    def propose(self, context, k, generator):
        return Draft(torch.tensor(self.tokens[:k]), None if self.q is None else self.q[:k])


def serial(draft=DRAFT, prompt=(0, 1), target=TARGET, **kw):
    args = dict(gamma=2, max_new_tokens=4, seed=0) | kw
    return sv.speculative_generate(target, draft, list(prompt), **args)


def batched(draft=DRAFT, prompt=(0, 1), target=TARGET, **kw):
    args = dict(gamma=2, max_new_tokens=4, seed=0, num_sequences=3) | kw
    return speculative_generate_batch(target, draft, list(prompt), **args)


PATHS = {"serial": serial, "batched": batched}


# -- prompts --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_prompt_ids_outside_the_vocabulary(path):
    with pytest.raises(ValueError, match=r"token id 9, outside the target's vocabulary \[0, 5\)"):
        PATHS[path](prompt=(0, 9))
    with pytest.raises(ValueError, match="negative token ids"):
        PATHS[path](prompt=(0, -1))


def test_several_prompts_given_to_a_single_sequence_function():
    with pytest.raises(ValueError, match="holds 2 prompts.*speculative_generate_batch"):
        sv.speculative_generate(TARGET, DRAFT, [[0, 1], [2]], max_new_tokens=3)
    with pytest.raises(ValueError, match="holds 2 prompts"):
        sv.autoregressive_generate(TARGET, [[0, 1], [2]], max_new_tokens=3)
    assert serial(prompt=[[0, 1]][0]).new_tokens  # one prompt wrapped in a list is fine


# -- drafts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_draft_ids_are_checked_before_the_target_runs(path):
    target = CountingToy(TARGET)
    with pytest.raises(ValueError, match=r"drafter 'bad' proposed token id 7, outside .*\[0, 5\)"):
        PATHS[path](Bad([7, 1]), target=target, do_sample=True)
    with pytest.raises(ValueError, match="proposed token id -1"):
        PATHS[path](Bad([-1, 1]), target=target, do_sample=True)
    assert target.calls == 0


@pytest.mark.parametrize("path", PATHS)
def test_non_finite_or_negative_q_draft_is_refused(path):
    q = torch.full((2, 5), 0.2)
    q[1, 3] = float("nan")
    with pytest.raises(FloatingPointError, match="drafter 'bad' reported a non-finite q_draft"):
        PATHS[path](Bad([1, 2], q), do_sample=True)
    q = torch.full((2, 5), 0.25)
    q[0, 4] = -0.25
    with pytest.raises(ValueError, match="negative probabilities in q_draft"):
        PATHS[path](Bad([1, 2], q), do_sample=True)


@pytest.mark.parametrize("path", PATHS)
def test_non_finite_draft_logits_name_the_draft(path):
    table = DRAFT.table.clone()
    table[:, 1] = float("inf")
    broken = ToyLM(table, 5, 2, name="broken-draft")
    with pytest.raises(FloatingPointError, match="draft .*produced non-finite logits"):
        PATHS[path](broken, do_sample=True)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["model", "drafter"])
def test_vocabulary_mismatch_on_every_path(path, kind):
    draft6 = ToyLM.random(6, 2, seed=3)
    draft = draft6 if kind == "model" else ModelDrafter(draft6)
    with pytest.raises(
        ValueError, match="vocabulary mismatch: draft logits have 6 entries, target logits 5"
    ):
        PATHS[path](draft, do_sample=True)


def test_vocabulary_mismatch_in_consistency_check():
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        consistency_check(TARGET, ToyLM.random(6, 2, seed=3), [[0]], n_samples=10,
                          max_new_tokens=2, progress=False)  # fmt: skip


def test_a_drafter_must_return_a_draft():
    class Wrong(Drafter):
        def propose(self, context, k, generator):
            return [1, 2]

    with pytest.raises(TypeError, match="returned list, not a Draft"):
        serial(Wrong())


# -- seeds, eos, gamma, positions ----------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", [1.5, "0", True])
def test_seed_types(path, seed):
    with pytest.raises(TypeError, match="seed must be an int, a torch.Generator or None"):
        PATHS[path](seed=seed)


def test_batched_rows_accept_a_generator_and_none():
    g = torch.Generator().manual_seed(5)
    a = batched(seed=g, do_sample=True)
    b = batched(seed=torch.Generator().manual_seed(5), do_sample=True)
    assert a.sequences == b.sequences and a.seeds == b.seeds
    assert len(batched(seed=None, do_sample=True).seeds) == 3


@pytest.mark.parametrize("path", PATHS)
def test_eos_token_id_types(path):
    with pytest.raises(TypeError, match="got the string '</s>'; pass tokenizer.eos_token_id"):
        PATHS[path](eos_token_id="</s>")
    with pytest.raises(TypeError, match="sequence of ints"):
        PATHS[path](eos_token_id=[1, "x"])
    assert PATHS[path](eos_token_id=torch.tensor([4])) is not None
    assert PATHS[path](eos_token_id=(3, 4)) is not None


def test_gamma_is_capped_by_what_can_still_be_emitted():
    """gamma=1e5 with 6 new tokens: drafts of at most 5, no giant allocation (the batched path
    once tried to allocate 40 GB)."""
    r = batched(gamma=10**5, max_new_tokens=6, do_sample=True)
    assert max(max(d) for d in r.drafted_counts) <= 5
    s = serial(gamma=10**5, max_new_tokens=6, do_sample=True)
    assert max(s.drafted_counts) <= 5


def test_positions_beyond_the_model_are_refused_or_warned():
    model = tiny_llama(7, max_positions=16)
    with pytest.raises(ValueError, match=r"exceeds the model's max_position_embeddings=16"):
        sv.autoregressive_generate(model, [1, 2, 3], max_new_tokens=20)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        speculative_generate_batch(model, model, [1, 2, 3], num_sequences=2, max_new_tokens=20)
    model.config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
    with pytest.warns(UserWarning, match="'dynamic' RoPE scaling extends it"):
        sv.autoregressive_generate(model, [1, 2, 3], max_new_tokens=14)


# -- verifier and temperature -----------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_greedy_verifier_with_sampling_is_refused(path):
    with pytest.raises(
        ValueError, match="verifier='greedy' is greedy matching and needs do_sample=False"
    ):
        PATHS[path](verifier="greedy", do_sample=True)
    assert PATHS[path](verifier="greedy") is not None  # greedy decoding: fine


def test_a_temperature_so_small_that_logits_overflow_is_the_greedy_limit():
    greedy = serial(max_new_tokens=8).new_tokens
    cold = serial(max_new_tokens=8, do_sample=True, temperature=1e-40).new_tokens
    assert cold == greedy  # never "the last token id every step"
    plain = sv.autoregressive_generate(TARGET, [0, 1], max_new_tokens=8, do_sample=True,
                                       temperature=1e-300, seed=0)  # fmt: skip
    assert (
        plain.new_tokens == sv.autoregressive_generate(TARGET, [0, 1], max_new_tokens=8).new_tokens
    )


# -- the checks' own arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(n_samples=1), ValueError, "n_samples must be an integer >= 2"),
        (dict(alpha=0.0), ValueError, r"alpha must be in \(0, 1\)"),
        (dict(alpha=1.5), ValueError, r"alpha must be in \(0, 1\)"),
        (dict(batch_size=0), ValueError, "batch_size must be an integer >= 1"),
        (dict(prompts=[]), ValueError, "prompts is empty"),
        (dict(prompts=[0, 1, 2]), TypeError, r"flat list of token ids.*\[ids\]"),
        (dict(prompts=[[0], [9]]), ValueError, "prompt 1: input_ids contains token id 9"),
        (dict(prompts="ab"), TypeError, "must be a list of prompts"),
        (dict(verifier="greedy"), ValueError, "needs do_sample=False"),
        (dict(temperature=0.0), ValueError, "temperature must be a finite number > 0"),
    ],
)
def test_consistency_check_arguments(kwargs, error, message):
    args = dict(prompts=[[0]], n_samples=10, max_new_tokens=2, progress=False) | kwargs
    target = CountingToy(TARGET)
    with pytest.raises(error, match=message):
        consistency_check(target, DRAFT, args.pop("prompts"), **args)
    assert target.calls == 0


def test_greedy_check_arguments():
    with pytest.raises(TypeError, match="flat list of token ids"):
        greedy_check(TARGET, DRAFT, [0, 1], max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        greedy_check(TARGET, DRAFT, [[0, 1]], max_new_tokens=0, progress=False)
    with pytest.raises(ValueError, match="near_tie"):
        greedy_check(TARGET, DRAFT, [[0, 1]], max_new_tokens=2, near_tie=-1, progress=False)


def test_the_load_generator_checks_its_engine_settings_up_front():
    with pytest.raises(ValueError, match="temperature"):
        make_engine(
            TARGET, DRAFT, speculative=True, max_new_tokens=4, do_sample=True, temperature=-1
        )
    with pytest.raises(TypeError, match="eos_token_id"):
        make_engine(TARGET, DRAFT, speculative=True, max_new_tokens=4, eos_token_id="</s>")
    with pytest.raises(ValueError, match="needs do_sample=False"):
        make_engine(
            TARGET, DRAFT, speculative=True, max_new_tokens=4, do_sample=True, verifier="greedy"
        )
    with pytest.raises(TypeError, match="seed must be"):
        make_engine(TARGET, DRAFT, speculative=False, max_new_tokens=4, seed="x")


def test_no_warning_on_a_clean_run():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not math.isnan(serial(do_sample=True).total_time)
