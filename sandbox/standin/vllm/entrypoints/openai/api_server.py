"""``python -m vllm.entrypoints.openai.api_server --model MODEL [flags]``."""

import sys

from vllm.server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], serve=False))
