"""``python3 -m sandbox.rootfs``: build the sandbox image when missing and print its path."""

import sys

from sandbox.rootfs import main

sys.exit(main())
