"""``python -m specviz.effects``: the stated tables of ``docs/bug_zoo.md`` and ``docs/drafters.md``
(the chain rules, the tree rules, the cross-vocabulary shortcuts; ``--shipped`` adds the
mistakes engines shipped, which take longer)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from .cross_vocab import markdown_table_cross_vocab
    from .trees import markdown_table_trees
    from .zoo import markdown_table

    argv = sys.argv[1:] if argv is None else argv
    tables = [markdown_table(), markdown_table_trees(), markdown_table_cross_vocab()]
    if "--shipped" in argv:
        from .shipped import markdown_table_shipped

        tables.append(markdown_table_shipped())
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
