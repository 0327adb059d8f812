"""What the tests share: the strict fake transport and the scripted hosts built on it, the clock, the sandbox
drivers (a sandbox host as the e2e tests see it, the CLI as a subprocess, the wheelhouse, the chaos run).

Test modules import from here and never from one another (tests/unit/test_test_imports.py); fixtures are
registered by tests/conftest.py (``pytest_plugins``), never imported into a test module."""
