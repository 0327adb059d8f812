"""``python -m sglang.launch_server [flags]``."""

from sglang.server import main

if __name__ == "__main__":
    main()
