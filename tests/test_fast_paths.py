"""The vectorised sampling paths (issue 30) give every row exactly what it gets alone: the
grouped sampler, the all-rows lossless rule and the short-row softmax; and they stay exact."""

from __future__ import annotations

import pytest
import torch

from specviz.core.sampling import sample_grouped, sample_with_uniform, softmax
from specviz.decoding.records import rank_stats
from specviz.verification.base import verify_lossless_groups


@pytest.mark.parametrize("vocab", [5, 300, 5000])
def test_grouped_sampling_equals_row_by_row(vocab):
    g = torch.Generator().manual_seed(vocab)
    laws = torch.rand(6, vocab, generator=g) ** 4  # unnormalised, peaked
    laws[2] = 0.0
    laws[2, vocab // 2] = 3.0  # a point mass
    owner = torch.randint(0, 6, (50,), generator=g)
    u = torch.rand(50, generator=g, dtype=torch.float64)
    u[0] = 1 - 2**-53  # the largest uniform: u * total may round up to the total
    got = sample_grouped(laws, owner, u)
    want = torch.stack([sample_with_uniform(laws[o], x) for o, x in zip(owner, u, strict=True)])
    assert torch.equal(got, want)
    assert (got[owner == 2] == vocab // 2).all()
    with pytest.raises(FloatingPointError, match="cannot sample"):
        sample_grouped(torch.zeros(2, vocab), owner[:3] % 2, u[:3])


def _groups(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    drafts, ps, gens = [], [], []
    for d, k in enumerate([3, 3, 1, 0, 2]):
        q = torch.softmax(torch.randn(k, vocab, generator=g) * 2, -1) if d != 1 else None
        tokens = torch.randint(0, vocab, (k,), generator=g)
        if q is not None and k:
            q[torch.arange(k), tokens] += 0.3  # drafted tokens have mass
            q = q / q.sum(-1, keepdim=True)
        drafts.append((tokens, q))
        ps.append(torch.softmax(torch.randn(4, vocab, generator=g) * 2, -1))
        gens.append([torch.Generator().manual_seed(seed * 100 + 10 * d + r) for r in range(4)])
    return drafts, torch.stack(ps), gens


@pytest.mark.parametrize("vocab", [7, 2000])
def test_all_rows_at_once_equal_each_row_alone(vocab):
    drafts, p, gens = _groups(vocab, seed=vocab)
    together = verify_lossless_groups(drafts, p, gens)
    _, _, again = _groups(vocab, seed=vocab)  # fresh generators in the same states
    for d, (draft, rows) in enumerate(zip(drafts, again, strict=True)):
        for r, gen in enumerate(rows):
            (alone,) = verify_lossless_groups([draft], p[d : d + 1], [[gen]])[0]
            v = together[d][r]
            assert (v.num_accepted, v.next_token, v.next_kind) == (
                alone.num_accepted, alone.next_token, alone.next_kind,
            )  # fmt: skip
            assert torch.equal(v.u, alone.u) and torch.equal(v.accept_prob, alone.accept_prob)
            if v.residual is not None:
                torch.testing.assert_close(v.residual, alone.residual)
                assert abs(float(v.residual.sum()) - 1) < 1e-5
    kinds = {v.next_kind for rows in together for v in rows}
    assert kinds == {"bonus", "corrected"}  # both branches exercised


def test_all_rows_rule_refuses_a_draft_with_no_mass():
    tokens, q = torch.tensor([1, 2]), torch.full((2, 5), 0.25)
    q[1, 2] = 0.0
    with pytest.raises(ValueError, match="q_draft = 0"):
        verify_lossless_groups([(tokens, q)], torch.full((1, 3, 5), 0.2), [[torch.Generator()]] * 1)
    with pytest.raises(ValueError, match="q_draft = 0"):
        gens = [[torch.Generator(), torch.Generator()]]
        verify_lossless_groups([(tokens, q)], torch.full((1, 3, 5), 0.2), gens)


def test_all_rows_rule_keeps_the_target_law():
    """Many rows of one step through the batched rule: the emitted first token follows p
    exactly (chi-square at alpha 1e-3, fixed seed); control: the residual taken from p
    instead of max(0, p - q) is rejected."""
    from scipy import stats

    vocab, rows = 4, 20000
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    q = torch.tensor([0.4, 0.3, 0.2, 0.1])
    g = torch.Generator().manual_seed(0)
    tokens = torch.multinomial(q, rows, replacement=True, generator=g)
    drafts = [(tokens[i : i + 1], q.view(1, -1)) for i in range(rows)]
    gens = [[torch.Generator().manual_seed(i)] for i in range(rows)]
    pt = p.expand(rows, 2, vocab).contiguous()
    out = verify_lossless_groups(drafts, pt, gens)
    first = [
        int(t) if v[0].num_accepted else v[0].next_token for t, v in zip(tokens, out, strict=True)
    ]
    counts = torch.bincount(torch.tensor(first), minlength=vocab).numpy()
    law = p.double().numpy() / float(p.double().sum())
    assert stats.chisquare(counts, law * rows).pvalue > 1e-3
    rejected = [v[0].next_token for v in out if not v[0].num_accepted]
    after = torch.bincount(torch.tensor(rejected), minlength=vocab).numpy()
    assert after[0] == after[1] == 0  # max(0, p - q) has no mass where q >= p
    n = len(rejected)
    assert stats.chisquare(after[2:], [0.25 * n, 0.75 * n]).pvalue > 1e-3
    # control: the test tells the residual from p itself (the shipped residual_from_target bug)
    assert stats.chisquare(after, law * n).pvalue < 1e-6


def test_short_row_softmax_is_exact_and_row_independent():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 9, generator=g) * 5
    x[3, :4] = float("-inf")  # filtered tokens
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    assert all(torch.equal(softmax(x)[i], softmax(x[i])) for i in range(64))
    wide = torch.randn(2, 5000, generator=g)
    assert torch.equal(softmax(wide), torch.softmax(wide, -1))  # long rows: ATen's own


def test_rank_stats_equals_the_direct_sums():
    """The mass ranked above each token, from sums of p - p(token) and its sign, against the
    direct masked sum (a wrong count of tokens above -- the control -- is far off)."""
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(64, 5000, generator=g) * 3, -1)
    tokens = torch.randint(0, 5000, (64,), generator=g)
    px, above = rank_stats(probs, tokens)
    p_tok = probs.gather(1, tokens.view(-1, 1))
    direct = torch.where(probs > p_tok, probs, 0.0).sum(1).double()
    assert above == pytest.approx(direct.tolist(), abs=1e-6)
    assert px == pytest.approx(p_tok.view(-1).tolist())
    wrong = direct + p_tok.view(-1).double()  # the token counted above itself
    assert max(abs(a - w) for a, w in zip(above, wrong.tolist(), strict=True)) > 1e-5


def test_rank_stats_counts_ties_by_id():
    probs = torch.tensor([[0.1, 0.3, 0.3, 0.3], [0.4, 0.3, 0.2, 0.1]])
    px, above = rank_stats(probs, torch.tensor([2, 2]))
    assert px == pytest.approx([0.3, 0.2])
    assert above == pytest.approx([0.3, 0.7])  # token 1 ties with token 2 and comes first
