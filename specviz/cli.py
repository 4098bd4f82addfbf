"""The ``specviz`` command line: ``specviz demo`` and ``specviz audit``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="specviz", description="speculative decoding, visible")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "demo", help="baseline vs speculative decoding on the default pair", add_help=False
    )
    sub.add_parser(
        "audit",
        help="speculation on vs off on an OpenAI-compatible server: statistics and load",
        add_help=False,
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from .lab import demo

        return demo.main(rest)
    if args.command == "audit":
        from .audit import cli as audit_cli

        return audit_cli.main(rest)
    parser.error(f"unknown command {args.command}")
    return 2
