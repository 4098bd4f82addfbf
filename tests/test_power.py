def test_sample_size_for_laws_never_promises_more_than_any_test_can_reach():
    """Issue-27 re-review of 12: on the pair's own logits two shortcuts (TV 0.550 and 0.235)
    were said to need 2 samples for 90% power at alpha 0.01; no test reaches more than
    alpha + 1 - (1 - TV)^n, 0.81 and 0.42 at n = 2. The floor that bound allows: 3 and 9."""
    import numpy as np

    from specviz.stats import sample_size_for_laws

    V = 1000
    P = np.full(V, 1 / V)
    for tv, floor in ((0.55, 3), (0.235, 9)):
        Q = (1 - tv) * P
        Q[0] += tv
        n = sample_size_for_laws(P, Q)
        assert n >= floor
        assert 0.01 + 1 - (1 - tv) ** n >= 0.9  # the bound allows the answer
