"""The Ansible collection driven for real over sandbox hosts: the collections built and installed with
ansible-galaxy, an environment that reads nothing from the caller's Ansible setup, a playbook run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sandbox import Sandbox, SandboxHost
from tests.support.node import REPO
from tests.support.wheelhouse import VENV

BIN = Path(os.sys.executable).parent  # ansible-playbook, ansible-galaxy beside this interpreter


def build_collections(out: Path) -> Path:
    """The collection (remediate.serving) and its old name's redirects (remediate.sglang, which depends on it), built
    with ``ansible-galaxy collection build`` into ``out`` and installed from those tarballs (the fixture
    ``collections``, tests/e2e/conftest.py, builds them once a session)."""
    for source in ("ansible", "ansible-sglang"):
        subprocess.run([BIN / "ansible-galaxy", "collection", "build", str(REPO / source), "--output-path", str(out)],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    tarballs = [str(t) for t in sorted(out.glob("remediate-*.tar.gz"))]
    assert len(tarballs) == 2, tarballs
    path = out / "collections"
    subprocess.run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", str(path), *tarballs],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return path


def ansible_env(tmp: Path, collections: Path) -> dict[str, str]:
    (tmp / "ansible.cfg").write_text("[defaults]\n")  # nothing from the caller's ansible.cfg
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "REMEDIATE_"))},
        "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",  # no master left running after the test
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",  # with -v: each result on one line, parsed by results()
        "ANSIBLE_CALLBACK_FORMAT_PRETTY": "False",
    }


class Play:
    """``ansible-playbook`` of ansible/examples/oom.yml over sandbox hosts (the venv of tests/support/wheelhouse.py)."""

    def __init__(self, fleet: Sandbox, hosts: list[SandboxHost], tmp: Path, collections: Path) -> None:
        self.hosts = hosts
        self.tmp = tmp
        self.env = ansible_env(tmp, collections)
        self.inventory = tmp / "inventory.yml"
        self.host_vars: dict[str, dict[str, Any]] = {h.name: {} for h in hosts}
        self.common = {
            "ansible_python_interpreter": f"{VENV}/bin/python",
            "ansible_ssh_common_args": f"-F {fleet.ssh_config}",
            "remediate_wait_timeout": 60,
            "remediate_throttle": 2,
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        document = {"gpu": {"hosts": self.host_vars, "vars": self.common}}
        self.inventory.write_text(yaml.safe_dump(document))
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(REPO / "ansible/examples/oom.yml")]
        return subprocess.run([*argv, *args], capture_output=True, text=True, env=self.env, cwd=self.tmp, timeout=600)
