"""Moved to :mod:`specviz.effects.shipped` (issue 29): the shipped mistakes' stated laws are
analysis over the rules, above verification. This path resolves the old names on first use,
with a DeprecationWarning, until specviz 0.5 (``python -m`` of it still prints the table)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_HOME = "specviz.effects.shipped"
_NAMES = (
    "ShippedLaw",
    "StatedChain",
    "markdown_table_shipped",
    "sample_shipped",
    "shipped_effects",
    "shipped_measured",
    "shipped_law",
    "stated_chain_setting",
)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"specviz.verification.shipped_laws.{name} moved to {_HOME} and the old path will be "
        f"removed in specviz 0.5; import it from {_HOME}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(_HOME), name)


if __name__ == "__main__":
    print(importlib.import_module(_HOME).markdown_table_shipped())
