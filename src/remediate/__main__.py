"""`python -m remediate`."""

from remediate.cli import main

main()
