"""Effect sizes of the bug zoo: what each broken rule does to the output law, exactly.

The rules themselves are verification (:mod:`specviz.verification.zoo`,
:mod:`specviz.verification.shipped`); this package is the analysis on top of them -- exact
first-token laws, TV distances, the samples a test needs, the stated toy settings and the
tables of ``docs/bug_zoo.md`` -- and so it may use the toys, the statistics and the drafters,
which the verification layer never imports.

* :mod:`.zoo` -- the chain rules (:func:`first_token_law`, :func:`zoo_effects`,
  :func:`stated_setting`);
* :mod:`.trees` -- the tree rules (:func:`tree_zoo_effects`, :func:`stated_tree_setting`);
* :mod:`.cross_vocab` -- the cross-vocabulary shortcuts;
* :mod:`.shipped` -- the mistakes engines shipped (:func:`shipped_law`, :func:`shipped_effects`).

``python -m specviz.effects`` prints every stated table.
"""

from __future__ import annotations

from .cross_vocab import cross_vocab_first_token_law, cross_vocab_zoo_effects
from .shipped import sample_shipped, shipped_effects, shipped_law
from .trees import stated_tree_setting, tree_zoo_effects
from .zoo import ZooEffect, first_token_law, stated_setting, zoo_effects

__all__ = [
    "ZooEffect",
    "cross_vocab_first_token_law",
    "cross_vocab_zoo_effects",
    "first_token_law",
    "sample_shipped",
    "shipped_effects",
    "shipped_law",
    "stated_setting",
    "stated_tree_setting",
    "tree_zoo_effects",
    "zoo_effects",
]
