"""One colour per meaning, in every figure (colour-blind safe: Okabe-Ito, plus Tol's wine).

Every figure of specviz takes its colours from :data:`PALETTE`, so a colour means the same
thing in every notebook: blue is always the target's p, orange always the draft's q, green what
was accepted (and the overlap min(p, q) that is accepted on average), purple the residual and
the token corrected from it, sky blue a bonus token, wine a rejected draft, grey what was never
looked at, black plain decoding (and theory, dashed), vermillion speculative decoding; a verdict
is green (equivalent), wine (inconsistent) or grey (inconclusive).
"""

from __future__ import annotations

__all__ = [
    "KIND_COLORS",
    "PALETTE",
    "SERIES",
    "VERDICT_COLORS",
    "series",
    "P_COLOR",
    "Q_COLOR",
    "RESIDUAL_COLOR",
    "THEORY_COLOR",
    "color",
    "hues",
]

#: meaning -> colour, for every figure.
PALETTE: dict[str, str] = {
    "p": "#0072B2",  # the target's law p_target
    "q": "#E69F00",  # the draft's law q_draft
    "overlap": "#009E73",  # min(p, q): the mass accepted on average
    "accepted": "#009E73",  # a draft token kept
    "residual": "#CC79A7",  # norm(max(0, p - q)) after a rejection
    "corrected": "#CC79A7",  # the token drawn from the residual
    "bonus": "#56B4E9",  # the target token after every draft was accepted
    "rejected": "#882255",  # a draft token tried and rejected
    "discarded": "#BBBBBB",  # drafted but never looked at (after a rejection, or cut)
    "unvisited": "#BBBBBB",  # a tree node never tried
    "target": "#000000",  # plain autoregressive decoding
    "plain": "#000000",
    "speculative": "#D55E00",  # speculative decoding (an arm of a comparison)
    "theory": "#000000",  # a law or formula (drawn dashed)
    "queued": "#BBBBBB",  # a request waiting for the server (load timelines)
    "to first token": "#DDCC77",  # a request's batch running, no token yet (prefill included)
    "streaming": "#44AA99",  # a request receiving its tokens
    # verdicts of a comparison (the sequential e-value curves are drawn in them)
    "equivalent": "#009E73",  # shown to keep the law (within a tolerance): green, as accepted
    "inconsistent": "#882255",  # shown to change the law: wine, as rejected
    "inconclusive": "#999999",  # neither yet
}

#: Colours of series that are *categories*, not meanings -- task categories, drafters,
#: precisions, metrics, a third engine: distinct hues (Tol's muted scheme) that are none of
#: the meaning colours above, so a category is never read as "accepted" or "the draft's q".
SERIES: tuple[str, ...] = (
    "#332288",  # indigo
    "#CC6677",  # rose
    "#999933",  # olive
    "#88CCEE",  # cyan
    "#AA4499",  # purple
    "#661100",  # brown
    "#6699CC",  # steel blue
    "#117733",  # forest
)


def series(names) -> dict[str, str]:
    """One :data:`SERIES` colour per name, in order of first appearance (stable across the
    figures of a notebook when they list the same names in the same order).

    >>> series(["code", "chat", "code"])
    {'code': '#332288', 'chat': '#CC6677'}
    """
    out: dict[str, str] = {}
    for n in names:
        out.setdefault(str(n), SERIES[len(out) % len(SERIES)])
    return out


def color(meaning: str) -> str:
    """The colour of ``meaning`` (a key of :data:`PALETTE`); a clear error otherwise."""
    try:
        return PALETTE[meaning]
    except KeyError:
        raise KeyError(f"no colour for {meaning!r}; the palette knows {sorted(PALETTE)}") from None


#: One colour per fate of a token slot (kept for the figures that index it by kind).
KIND_COLORS: dict[str, str] = {
    k: PALETTE[k] for k in ("accepted", "corrected", "bonus", "discarded", "target")
}
P_COLOR = PALETTE["p"]
Q_COLOR = PALETTE["q"]
RESIDUAL_COLOR = PALETTE["residual"]
THEORY_COLOR = PALETTE["theory"]


#: What a statistical test did with a rule (notebook 04's bars, by outcome, not by label).
VERDICT_COLORS: dict[str, str] = {
    "caught": "#332288",  # a broken rule the test rejected
    "cannot tell": "#DDAA33",  # not rejected, and this size could not see its damage
    "missed": "#CC3311",  # not rejected although a test of this size should have seen it
    "passed": "#999933",  # a lossless rule the test did not reject
    "false alarm": "#EE3377",  # a lossless rule the test rejected
}


def hues(labels: list[str] | tuple[str, ...]) -> dict[str, str]:
    """:func:`series` under the name notebooks 00-05 use.

    >>> hues(["code", "chat"]) == {"code": SERIES[0], "chat": SERIES[1]}
    True
    """
    return series(labels)
