"""`ansible-test sanity`, which every collection in the Ansible package and every certified collection must pass,
run on the collection (ansible/, remediate.serving) and on its old name's redirect collection (ansible-sglang/,
remediate.sglang), each copied to ``ansible_collections/<namespace>/<name>/`` as ansible-test requires.

Offline bootstrap: ansible-test makes a virtualenv per sanity test and bootstraps pip into it with a script it
downloads from ci-files.testing.ansible.com, which this machine (like many CI runners) cannot reach; it uses
``~/.ansible/test/cache/get_pip_<version>.py`` when present. :func:`pip_bootstrap` provides that script: a few
lines running pip from its own wheel (fetched once from the package index with ``pip download``), as get-pip.py
does from the zip it embeds. The virtualenvs stay in ansible-test's cache in the user's home
(``~/.ansible/test/venv``), never in the tree: a later run reuses them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible"
REDIRECTS = REPO / "ansible-sglang"  # remediate.sglang: the old FQCNs, redirected (meta/runtime.yml)
BIN = Path(sys.executable).parent
CACHE = Path.home() / ".ansible" / "test" / "cache"  # ansible-test's own (requirements.py: bootstrap())
# The one finding a certified collection may list in its ignore file: the modules are Apache-2.0, not GPLv3.
ALLOWED_IGNORES = {"validate-modules:missing-gplv3-license"}

BOOTSTRAP = '''\
"""pip {version} for ansible-test's virtualenvs, offline: pip run from its own wheel beside this file (written by
remediate's tests/e2e/test_ansible_sanity.py; get-pip.py does the same from the zip it embeds)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "{wheel}"))
from pip._internal.cli.main import main  # noqa: E402

# ansible-test passes get-pip.py's options: the packages to install (pip=={version}) and --no-setuptools/--no-wheel
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--no-index", "--find-links", HERE, *args]))
'''


def pip_version() -> str:
    """The pip ansible-test bootstraps into its virtualenvs for Python 3.11."""
    from ansible_test._internal.python_requirements import get_venv_packages

    return get_venv_packages(SimpleNamespace(version="3.11"))["pip"]  # type: ignore[arg-type]


def pip_bootstrap(version: str) -> Path:
    """``~/.ansible/test/cache/get_pip_<version>.py`` and pip's wheel beside it, made once (atomically)."""
    script = CACHE / f"get_pip_{version.replace('.', '_')}.py"
    wheel = f"pip-{version}-py3-none-any.whl"
    if script.exists() and (CACHE / wheel).exists():
        return script
    CACHE.mkdir(parents=True, exist_ok=True)
    if not (CACHE / wheel).exists():
        argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE), f"pip=={version}"]
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
    partial = script.with_name(f"{script.name}.{os.getpid()}")
    partial.write_text(BOOTSTRAP.format(version=version, wheel=wheel))
    partial.rename(script)
    return script


def collection_tree(source: Path, into: Path) -> Path:
    """``source`` copied to ``into/ansible_collections/<namespace>/<name>`` (its galaxy.yml's names)."""
    galaxy = yaml.safe_load((source / "galaxy.yml").read_text())
    tree = into / "ansible_collections" / galaxy["namespace"] / galaxy["name"]
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__", "*.tar.gz", ".*cache"))
    return tree


def test_the_ignore_file_lists_only_what_certification_allows() -> None:
    files = sorted((COLLECTION / "tests" / "sanity").glob("ignore-*.txt"))
    assert [f.name for f in files] == ["ignore-2.19.txt"]
    for line in files[0].read_text().splitlines():
        path, code = line.split("#", 1)[0].split()
        assert code in ALLOWED_IGNORES and (COLLECTION / path).is_file(), line


@pytest.mark.parametrize("source", [COLLECTION, REDIRECTS], ids=["remediate.serving", "remediate.sglang"])
def test_ansible_test_sanity_passes_on_the_collection(source: Path, tmp_path: Path) -> None:
    pip_bootstrap(pip_version())
    tree = collection_tree(source, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    argv = [str(BIN / "ansible-test"), "sanity", "--requirements", "--python", "3.11", "--color", "no"]
    ran = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=1500, check=False)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out[-6000:]
    for name in ("validate-modules", "pylint", "import", "ansible-doc", "runtime-metadata", "yamllint", "changelog"):
        assert f'Running sanity test "{name}"' in out, name  # each ran, none was skipped
