"""``sglang serve [MODEL] [flags]`` (the console script of sglang >= 0.5.5): ``python -m sglang.cli.main``."""

from __future__ import annotations

import sys

from sglang.server import main as serve_main


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] != "serve":
        sys.stderr.write("usage: sglang serve [MODEL] --model-path MODEL [server args...]\n")
        sys.exit(2)
    rest = argv[1:]
    if rest and not rest[0].startswith("-"):  # 0.5.23: positional model
        rest = ["--model-path", rest[0], *rest[1:]]
    cleaned: list[str] = []
    skip = False
    for tok in rest:  # strip the backend chooser: --model-type X / --model-type=X
        if skip:
            skip = False
        elif tok == "--model-type":
            skip = True
        elif not tok.startswith("--model-type="):
            cleaned.append(tok)
    rest = cleaned
    serve_main(rest, prog="sglang serve")


if __name__ == "__main__":
    main()
