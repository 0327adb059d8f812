"""``vllm serve MODEL [flags]``: vLLM's console script is vllm/entrypoints/cli/main.py."""

import sys

from vllm.server import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "serve":
        sys.stderr.write("usage: vllm serve [model_tag] [options]\n")
        sys.exit(2)
    sys.exit(main(args[1:], serve=True))
