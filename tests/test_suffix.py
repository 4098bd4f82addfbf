"""SuffixDrafter: the trie's counts, the session memory, greedy identity and exact sampling.

Law checks are Pearson chi-square tests at alpha = 0.001 with fixed seeds (false-positive rate
0.1%, reproducible); the negative control -- argmax proposals reported with the count law as q,
the transformers #32867 mistake -- must be rejected at p < 1e-6 with the same sample size.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.drafting.suffix import SuffixDrafter, SuffixTrie
from specviz.prompts import load_prompts, render_prompt
from specviz.stats import grouped_goodness_of_fit

ALPHA = 1e-3
CONTROL_P = 1e-6
N = 20_000
PARAMS = sv.SamplingParams(True, 1.0, None, None)


pytestmark = pytest.mark.usefixtures("one_thread")


def _dump(trie: SuffixTrie) -> dict[tuple[int, ...], int]:
    """Every stored substring and its count."""
    out, stack = {}, [((), trie.root)]
    while stack:
        path, node = stack.pop()
        for t, child in (node.children or {}).items():
            out[path + (t,)] = child.count
            stack.append((path + (t,), child))
    return out


def _brute(docs: list[list[int]], depth: int) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for d in docs:
        for i in range(len(d)):
            for j in range(i + 1, min(len(d), i + depth) + 1):
                out[tuple(d[i:j])] = out.get(tuple(d[i:j]), 0) + 1
    return out


def test_trie_counts_every_substring_up_to_the_depth():
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(0, 4, (n,), generator=g).tolist() for n in (30, 7, 19)]
    trie = SuffixTrie(max_depth=5)
    live = trie.new_document(docs[0][:10])
    trie.extend(live, docs[0][10:])  # appending in chunks == inserting at once
    for d in docs[1:]:
        trie.new_document(d)
    assert _dump(trie) == _brute(docs, 5)
    assert trie.nodes == 1 + len(_brute(docs, 5))


def test_removal_and_the_node_cap_keep_counts_exact():
    g = torch.Generator().manual_seed(1)
    docs = [torch.randint(0, 6, (40,), generator=g).tolist() for _ in range(6)]
    trie = SuffixTrie(max_depth=6, max_nodes=400)
    for d in docs:
        trie.new_document(d)
    kept = len(trie.docs)
    assert trie.nodes <= 400 and kept < len(docs) and trie.evicted == len(docs) - kept
    assert _dump(trie) == _brute(docs[len(docs) - kept :], 6)  # FIFO: the newest survive


def test_longest_match_prefers_the_longest_seen_suffix():
    trie = SuffixTrie(max_depth=8)
    trie.new_document([1, 2, 3, 9, 1, 2, 3, 4, 7, 2, 3, 5, 2, 3, 5])
    node, m = trie.longest_match([8, 1, 2, 3], max_len=7)
    assert m == 3 and set(node.children) == {9, 4}
    node, m = trie.longest_match([6, 2, 3], max_len=7)  # "2 3" -> 5 twice, 9 and 4 once
    assert m == 2 and node.children[5].count == 2


def test_memory_persists_across_generations_on_one_object():
    target, _ = sv.toy_pair(5, 2, seed=0)
    drafter = SuffixDrafter()
    kw = dict(gamma=4, max_new_tokens=24, seed=0)
    first = sv.speculative_generate(target, drafter, [0, 1], **kw)
    drafter.end([0, 1, *first.new_tokens])
    second = sv.speculative_generate(target, drafter, [0, 1], **kw)
    assert second.new_tokens == first.new_tokens  # greedy
    assert second.target_calls < first.target_calls
    assert second.target_calls <= -(-24 // 5)  # the whole answer was drafted from memory
    assert drafter.stats().documents == 2


def test_the_node_cap_freezes_a_live_document_alone():
    drafter = SuffixDrafter(max_depth=4, max_nodes=20)
    drafter.start(torch.arange(50), sv.SamplingParams())
    assert drafter.stats().nodes <= 20 + 4  # the cap is checked after each token (<= D over)


@pytest.mark.parametrize("bad", [dict(min_match=0), dict(min_match=24), dict(sample=True)])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(ValueError):
        SuffixDrafter(**bad)


# -- greedy identity on SmolLM2 -------------------------------------------------------------

MAX_NEW = 48


def test_greedy_identity_on_smollm2_with_session_memory(smollm2):
    model, tok = smollm2
    prompts = load_prompts(split="heldout", categories=["structured", "extraction"], per_category=1)
    drafter = SuffixDrafter()  # one session across both prompts (and both samplers)
    for p in prompts:
        ids = render_prompt(tok, p)
        kw = dict(max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id)
        base = sv.autoregressive_generate(model, ids, **kw)
        spec = sv.speculative_generate(model, drafter, ids, gamma=4, **kw)
        assert spec.new_tokens == base.new_tokens, f"suffix drafter differs from greedy on {p.id}"
        drafter.end(ids + spec.new_tokens)
        sampled = SuffixDrafter(sample=True, vocab_size=model.config.vocab_size)
        spec_q = sv.speculative_generate(model, sampled, ids, gamma=4, **kw)
        assert spec_q.new_tokens == base.new_tokens  # greedy ignores the sampling option
    assert drafter.stats().documents == 2


# -- exact sampling on a toy model ----------------------------------------------------------


class ArgmaxWithCountQ(SuffixDrafter):
    """Negative control: propose the most frequent continuation but report the count law."""

    def _pick(self, node, generator, use_q):
        picked = super()._pick(node, generator, False)
        if picked is None or not use_q:
            return picked
        tok, child, _ = picked
        return tok, child, self._count_law(self._candidates(node))


def continuation_pvalue(target, drafter, *, gamma=3, length=3, prompt=(0,), n=N, seed=0):
    """Chi-square of ``n`` speculative continuations against the exact law. The drafter object
    (and its memory) is shared by all ``n`` runs: losslessness must hold whatever it has seen."""
    law = sv.exact_continuation_law(target, list(prompt), length, PARAMS)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    g = torch.Generator().manual_seed(seed)
    drafted = 0
    for _ in range(n):
        r = sv.speculative_generate(
            target, drafter, list(prompt), gamma=gamma, max_new_tokens=length, do_sample=True,
            seed=g, trace=False,
        )  # fmt: skip
        drafter.end([*prompt, *r.new_tokens])
        drafted += sum(r.drafted_counts)
        i = index.get(tuple(r.new_tokens))
        if i is None:
            return 0.0, drafted
        counts[i] += 1
    expected = np.array([law[k] for k in keys])
    p = grouped_goodness_of_fit({0: dict(enumerate(counts))}, lambda _: expected / expected.sum())
    return p.pvalue, drafted


TOY = sv.toy_pair(5, 2, noise=1.0, seed=0)[0]


@pytest.mark.parametrize(
    "drafter, ok",
    [
        (lambda: SuffixDrafter(), True),  # point masses (q=None)
        # drawn from the counts (those seen >= 3 times), that law reported as q
        (lambda: SuffixDrafter(sample=True, vocab_size=5, min_count=3), True),
        (lambda: ArgmaxWithCountQ(sample=True, vocab_size=5), False),  # transformers #32867
    ],
    ids=["point_mass", "count_law_q", "argmax_with_q_control"],
)
def test_sampled_continuations_follow_the_exact_law(drafter, ok):
    p, drafted = continuation_pvalue(TOY, drafter())
    assert drafted > N, "the drafter must actually propose (memory is shared across runs)"
    assert (p > ALPHA) if ok else (p < CONTROL_P), p
