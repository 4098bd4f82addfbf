"""Issue 28, the decoding core's periphery: every class of the 2026-12-03 bad-input report that
lives in generation, drafting and verification ends in one clear error before any model runs,
or in correct behaviour (classes C1-C9 and C16 of notes/bad-inputs-report.md;
``scripts/bad_inputs_probe.py`` tries them all, and a fresh set of the same kinds)."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.core.sampling import SamplingParams, sample
from specviz.drafting import Draft, Drafter, TreeDraft
from specviz.drafting.policies import (
    AcceptanceEMA,
    BatchFallback,
    ConfidenceStop,
    HeuristicGamma,
)
from specviz.fixtures.llamas import tiny_llama
from specviz.fixtures.toy import ToyLM
from specviz.verification import verify_greedy, verify_lossless
from specviz.verification.trees import verify_tree_greedy, verify_tree_lossless

TT, TD = sv.toy_pair(5, 2, seed=0)
T, D = tiny_llama(50, seed=0), tiny_llama(50, seed=1)


class Counting(ToyLM):
    """A toy target that counts its forward passes (checks must run before it)."""

    def __init__(self) -> None:
        super().__init__(TT.table, TT.vocab_size, TT.order)
        self.calls = 0

    def next_logits(self, context):
        self.calls += 1
        return super().next_logits(context)


class Reported(Drafter):
    """A custom drafter that draws from ``draw`` but reports ``q`` (both [V])."""

    name = "reported"

    def __init__(self, q: torch.Tensor, draw: torch.Tensor | None = None) -> None:
        self.q, self.draw = q, (q if draw is None else draw)

    def propose(self, context, k, generator):
        toks = torch.stack([sample(self.draw, generator) for _ in range(k)])
        return Draft(toks, self.q.expand(k, -1).clone())


class Trees(Drafter):
    name = "trees"
    proposes_trees = True

    def __init__(self, make) -> None:
        self.make = make

    def propose(self, context, k, generator):
        return self.make(k)


def serial(draft, target=TT, **kw):
    return sv.speculative_generate(target, draft, [1], **(dict(max_new_tokens=4) | kw))


def batched(draft, target=TT, **kw):
    args = dict(max_new_tokens=4, num_sequences=3) | kw
    return sv.speculative_generate_batch(target, draft, [1], **args)


PATHS = {"serial": serial, "batched": batched}


# -- C5: q_draft must be the normalised law the draft was drawn from ---------------------------


def first_token_freqs(draft, n: int = 20000) -> np.ndarray:
    r = sv.speculative_generate_batch(
        TT, draft, [1], num_sequences=n, max_new_tokens=1, gamma=1, do_sample=True, seed=0
    )
    counts = Counter(s[0] for s in r.sequences)
    return np.array([counts[i] / n for i in range(5)])


def test_unnormalised_q_draft_is_refused_before_the_target_runs():
    """The report's C5: q = 1 everywhere gave token 0 at 0.355 against the exact 0.196."""
    target = Counting()
    ones = Reported(torch.ones(5), torch.softmax(torch.zeros(5), -1))
    for run in PATHS.values():
        with pytest.raises(ValueError, match=r"row 0 sums to 5, not 1 \(tolerance 0.001\)"):
            run(ones, target=target, do_sample=True)
    assert target.calls == 0


def test_a_normalised_q_keeps_the_exact_law_negative_control():
    """The same harness with a correct drafter: the first-token law is the target's exactly
    (20,000 samples: 4 standard errors are < 0.013)."""
    q = torch.softmax(torch.tensor([0.0, 1.0, 0.5, -1.0, 0.2]), -1)
    exact = TT.next_probs([1], SamplingParams(True)).numpy()
    freqs = first_token_freqs(Reported(q))
    assert np.abs(freqs - exact).max() < 0.013, (freqs, exact)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "q, message",
    [
        (torch.full((5,), 0.1), r"sums to 0.5, not 1"),
        (torch.log_softmax(torch.zeros(5), -1), "negative probabilities in q_draft"),
        (torch.zeros(5, dtype=torch.long), "q_draft of dtype torch.int64"),
    ],
    ids=["half", "logprobs", "int"],
)
def test_bad_q_draft_on_chains(path, q, message):
    with pytest.raises(ValueError, match=message):
        PATHS[path](Reported(q, torch.softmax(torch.zeros(5), -1)), do_sample=True)


@pytest.mark.parametrize("path", PATHS)
def test_unnormalised_q_draft_of_a_tree_is_refused(path):
    bad = Trees(
        lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1, -1]), torch.full((2, 5), 0.5))
    )
    with pytest.raises(
        ValueError, match="drafter 'trees' reported a q_draft whose row 0 sums to 2.5"
    ):
        PATHS[path](bad, do_sample=True)


def test_q_draft_within_its_rounding_is_accepted():
    """float16 laws sum to 1 only within their rounding: the tolerance scales with the dtype."""
    q = torch.softmax(torch.randn(5, generator=torch.Generator().manual_seed(1)), -1).half()
    assert len(serial(Reported(q, q.float()), do_sample=True).new_tokens) == 4


# -- C9: verifiers called directly ---------------------------------------------------------


def _p(rows: int, v: int = 5) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, v, generator=torch.Generator().manual_seed(0)), -1)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: verify_lossless(torch.tensor([0, 1]), _p(2), _p(2), None), r"p_target must be \[k\+1, V\] = \[3, V\]"),
        (lambda: verify_lossless(torch.tensor([0, 1]), _p(2, 7), _p(3), None), r"q_draft must be None or \[k, V\] = \[2, 5\]"),
        (lambda: verify_lossless(torch.tensor([0, 7]), _p(2), _p(3), None), r"token id 7 is outside the vocabulary \[0, 5\)"),
        (lambda: verify_greedy(torch.tensor([[0, 1]]), None, _p(3), None), "tokens must be a 1-D tensor"),
        (lambda: verify_tree_lossless(TreeDraft(torch.tensor([0, 1]), torch.tensor([-1, 0]), _p(2)), _p(2), None), r"p_nodes must be \[n\+1, V\] = \[3, V\]"),
        (lambda: verify_tree_greedy(TreeDraft(torch.tensor([0, 9]), torch.tensor([-1, 0])), _p(3), None), "tree token id 9 is outside"),
        (lambda: verify_tree_lossless(Draft(torch.tensor([0])), _p(2), None), "tree must be a TreeDraft"),
    ],
)  # fmt: skip
def test_low_level_verifiers_check_shapes(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_low_level_verifiers_still_verify():
    g = torch.Generator().manual_seed(0)
    v = verify_lossless(torch.tensor([0, 1]), _p(2), _p(3), g)
    assert 0 <= v.num_accepted <= 2 and 0 <= v.next_token < 5


# -- C8: malformed trees --------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_float_parents_are_refused(path):
    with pytest.raises(
        ValueError, match="TreeDraft.parents must hold integers, got dtype torch.float32"
    ):
        PATHS[path](Trees(lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1.0, -1.0]))))


@pytest.mark.parametrize("path", PATHS)
def test_duplicate_siblings_drawn_without_replacement_are_refused(path):
    q = torch.softmax(torch.zeros(2, 5), -1)
    dup = Trees(
        lambda k: TreeDraft(torch.tensor([2, 2]), torch.tensor([-1, -1]), q, "without_replacement")
    )
    with pytest.raises(ValueError, match="same token twice under one parent"):
        PATHS[path](dup, do_sample=True)
    # negative control: the same siblings drawn independently are legal (with replacement)
    ind = Trees(lambda k: TreeDraft(torch.tensor([2, 2]), torch.tensor([-1, -1]), q, "independent"))
    PATHS[path](ind, do_sample=True)


# -- C7: tree drafter settings ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(branching=4), "branching must be a sequence of children per depth"),
        (dict(branching="22"), "branching must be a sequence"),
        (dict(branching=(2, 0)), "branching must be positive integers"),
        (dict(dynamic=True, budget=2.5), "budget must be an integer >= 1, got float 2.5"),
        (dict(dynamic=True, budget="8"), "budget must be an integer >= 1, got the string '8'"),
        (dict(dynamic=True, budget=True), "budget must be an integer >= 1, got bool True"),
        (dict(branching=(4,), budget=3), "pass dynamic=True with it"),
        (dict(dynamic=True, budget=4, max_depth=2.5), "max_depth must be an integer >= 1"),
        (dict(dynamic=True, budget=4, width=0), "width must be an integer >= 1"),
        (dict(dynamic="yes", budget=4), "dynamic must be True or False"),
    ],
)
def test_tree_drafter_settings(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        sv.TreeDrafter(D, **kwargs)


def test_tree_drafter_needs_a_model_and_lookup_counts():
    with pytest.raises(TypeError, match="TreeDrafter grows trees from a draft \\*model\\*"):
        sv.TreeDrafter(sv.PromptLookupDrafter(), (2,))
    with pytest.raises(ValueError, match="max_ngram must be an integer >= 1, got float 2.5"):
        sv.PromptLookupDrafter(max_ngram=2.5)
    # legal: numpy integers
    tree = sv.TreeDrafter(D, tuple(np.array([2, 1])))
    assert tree.branching == (2, 1) and all(type(b) is int for b in tree.branching)


# -- C1: numpy integers and 0-d tensors are integers --------------------------------------------


def test_numpy_integers_and_0d_tensors_are_taken_where_an_int_is():
    ref = sv.speculative_generate(T, D, [0, 3], max_new_tokens=4, seed=5, gamma=2, do_sample=True, eos_token_id=7)  # fmt: skip
    for prompt in (
        [0, 3],
        list(np.array([0, 3])),
        [torch.tensor(0), torch.tensor(3)],
        np.array([0, 3]),
    ):
        r = sv.speculative_generate(
            T, D, prompt, max_new_tokens=np.int64(4), seed=np.int64(5), gamma=np.int32(2),
            do_sample=np.bool_(True), eos_token_id=np.int64(7),
        )  # fmt: skip
        assert r.new_tokens == ref.new_tokens
    b = sv.speculative_generate_batch(T, D, [0, 3], num_sequences=torch.tensor(2), max_new_tokens=torch.tensor(3), seed=np.int64(1))  # fmt: skip
    assert [len(s) for s in b.sequences] == [3, 3]
    two = sv.speculative_generate_batch(T, D, np.array([[0, 3], [1, 2]]), max_new_tokens=2)
    assert len(two.sequences) == 2
    p = SamplingParams(True, np.float32(0.5), np.int64(3), np.float64(0.9))
    assert (type(p.temperature), type(p.top_k), type(p.top_p)) == (float, int, float)


def test_whole_floats_are_still_not_counts():
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got float 4.0"):
        sv.speculative_generate(T, D, [0, 3], max_new_tokens=4.0)


# -- C2, C3: flags and seeds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(do_sample="False"), TypeError, "do_sample must be True or False, got the string 'False'"),
        (dict(do_sample=1), TypeError, "do_sample must be True or False, got int 1"),
        (dict(do_sample=True, temperature=True), ValueError, "temperature must be a number"),
        (dict(do_sample=True, top_p="0.9"), ValueError, "top_p must be in"),
        (dict(eos_token_id=999), ValueError, r"eos_token_id 999 is outside the target's vocabulary \[0, 50\)"),
        (dict(eos_token_id=[1, 50]), ValueError, "eos_token_id 50 is outside"),
        (dict(seed=2**64), ValueError, r"seed must be in \[-2\*\*63, 2\*\*64 - \d\]"),
        (dict(seed=-(2**64)), ValueError, "seed must be in"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("path", ["serial", "batched"])
def test_flags_and_seeds(path, kwargs, exc, message):
    run = sv.speculative_generate if path == "serial" else sv.speculative_generate_batch
    extra = {} if path == "serial" else {"num_sequences": 2}
    with pytest.raises(exc, match=message):
        run(T, D, [0, 3], max_new_tokens=3, **extra, **kwargs)


def test_batched_seeds_must_leave_room_for_every_row():
    with pytest.raises(ValueError, match=r"rows use seed .. seed \+ 1"):
        sv.speculative_generate_batch(T, D, [0, 3], num_sequences=2, max_new_tokens=3, seed=2**64 - 1)  # fmt: skip
    r = sv.speculative_generate_batch(T, D, [0, 3], num_sequences=2, max_new_tokens=3, seed=2**64 - 2)  # fmt: skip
    assert r.seeds == [2**64 - 2, 2**64 - 1]


# -- C4, C6: models on meta, the draft's own position limit --------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda m: sv.speculative_generate(T, m, [0, 3], max_new_tokens=3),
        lambda m: sv.speculative_generate_batch(T, m, [0, 3], num_sequences=2, max_new_tokens=3),
        lambda m: sv.speculative_generate(T, sv.TreeDrafter(m, (2,)), [0, 3], max_new_tokens=3),
    ],
    ids=["serial", "batched", "tree"],
)
def test_a_draft_on_meta_is_named(call):
    with pytest.raises(
        ValueError, match=r"the draft model \(LlamaForCausalLM\) is on the 'meta' device"
    ):
        call(tiny_llama(50).to("meta"))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: sv.speculative_generate(m, D, [0, 3], max_new_tokens=3),
        lambda m: sv.speculative_generate_batch(m, D, [0, 3], num_sequences=2, max_new_tokens=3),
        lambda m: sv.autoregressive_generate(m, [0, 3], max_new_tokens=3),
    ],
    ids=["serial", "batched", "plain"],
)
def test_a_target_on_meta_is_named(call):
    with pytest.raises(ValueError, match="the target model .* is on the 'meta' device"):
        call(tiny_llama(50).to("meta"))


def _gpt2(positions: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=50, n_positions=positions, n_embd=16, n_layer=1, n_head=2)
    return GPT2LMHeadModel(cfg).eval()


def test_the_draft_position_limit():
    """Learned absolute positions cannot run past their table: an error before any call; a
    rotary draft runs past its trained length with a warning (the law is the target's)."""
    with pytest.raises(ValueError, match="exceeds the draft model's max_position_embeddings=32"):
        sv.speculative_generate(T, _gpt2(32), list(range(40)), max_new_tokens=4)
    with pytest.raises(ValueError, match="draft model's max_position_embeddings=16"):
        sv.speculative_generate_batch(T, _gpt2(16), list(range(14)), num_sequences=2, max_new_tokens=4)  # fmt: skip
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = sv.speculative_generate(T, tiny_llama(50, max_positions=8), list(range(10)), max_new_tokens=3)  # fmt: skip
    assert len(r.new_tokens) == 3
    assert any("the draft's max_position_embeddings=8" in str(x.message) for x in w)


# -- C16: gamma policies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ConfidenceStop(threshold="0.5"), "threshold must be a finite number in"),
        (lambda: ConfidenceStop(threshold=1.5), "threshold must be a finite number in"),
        (lambda: AcceptanceEMA(prior=5), r"prior must be a finite number in \[0, 1\]"),
        (lambda: AcceptanceEMA(c=-1.0), "c must be a finite number >= 0"),
        (lambda: AcceptanceEMA(max_batch=0), "max_batch must be an integer >= 1"),
        (lambda: AcceptanceEMA(min_speedup=float("nan")), "min_speedup must be a finite number"),
        (lambda: AcceptanceEMA(weight="0.1"), "weight must be a finite number"),
        (lambda: BatchFallback(max_batch=1.5), "max_batch must be an integer >= 1"),
        (lambda: HeuristicGamma(initial=True), "initial must be an integer >= 1, got bool True"),
    ],
)
def test_policy_settings(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_policies_take_numpy_counts():
    pol = HeuristicGamma(np.int64(2), max_gamma=np.int64(4))
    assert len(sv.speculative_generate(T, D, [0, 3], max_new_tokens=4, gamma=pol).new_tokens) == 4
