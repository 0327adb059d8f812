"""The Ansible collection (ansible/) without hosts: `ansible-doc` renders each module and documents exactly its
argument spec, `ansible-galaxy collection build` produces the tarball, the examples parse (the rollout's canary
and batches as documented), the EDA rulebook validates against ansible-rulebook's own schema, and a target
without the library fails with Ansible's missing_required_lib message."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "ansible"
REDIRECTS = ROOT / "ansible-sglang"  # remediate.sglang, the old name: redirects only
BIN = Path(sys.executable).parent
MODULES = ["oom", "rollback", "status", "diagnose"]
RULEBOOK_VERSION = "1.3.2"  # ansible-rulebook, whose wheel carries ansible_rulebook/schema/ruleset_schema.json
TYPES = {"str": "str", "int": "int", "float": "float", "bool": "bool"}


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An ANSIBLE_COLLECTIONS_PATH holding this tree's collection as remediate.serving, and remediate.sglang (the old
    name's redirects)."""
    root = tmp_path_factory.mktemp("collections")
    (root / "ansible_collections" / "remediate").mkdir(parents=True)
    (root / "ansible_collections" / "remediate" / "serving").symlink_to(COLLECTION)
    (root / "ansible_collections" / "remediate" / "sglang").symlink_to(REDIRECTS)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


def _env(collections: Path, tmp: Path) -> dict[str, str]:
    (tmp / "ansible.cfg").write_text("[defaults]\n")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp / "home"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_NOCOLOR": "1",
    }


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders_each_module_with_exactly_its_argument_spec(
    name: str, collections: Path, tmp_path: Path
) -> None:
    env = _env(collections, tmp_path)
    text = _run([str(BIN / "ansible-doc"), f"remediate.serving.{name}"], env, tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"remediate.serving.{name}" in text.stdout and "EXAMPLES" in text.stdout and "RETURN VALUES" in text.stdout
    doc = json.loads(
        _run(
            [
                str(
                    BIN / "ansible-doc",
                ),
                "--json",
                f"remediate.serving.{name}",
            ],
            env,
            tmp_path,
        ).stdout
    )
    options = doc[f"remediate.serving.{name}"]["doc"]["options"]
    spec = importlib.import_module(f"ansible_collections.remediate.serving.plugins.modules.{name}").ARGUMENT_SPEC
    assert set(options) == set(spec)
    for key, arg in spec.items():
        documented = options[key]
        assert documented["type"] == TYPES[arg["type"]], key
        assert documented.get("default") == arg.get("default"), key
        assert documented.get("choices") == arg.get("choices"), key


def test_galaxy_build_produces_the_tarball(tmp_path: Path) -> None:
    built = _run([str(BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path", str(tmp_path)],
                 {**os.environ, "ANSIBLE_HOME": str(tmp_path / "home")}, tmp_path)  # fmt: skip
    assert built.returncode == 0, built.stderr
    (tarball,) = tmp_path.glob("remediate-serving-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert (manifest["collection_info"]["namespace"], manifest["collection_info"]["name"]) == ("remediate", "serving")
    expected = {f"plugins/modules/{m}.py" for m in MODULES} | {
        "plugins/module_utils/remediate_module.py",
        "roles/install/tasks/main.yml",
        "examples/oom.yml",
        "examples/rulebook.yml",
        "README.md",
    }
    assert expected <= names


def test_the_examples_pass_ansibles_syntax_check(collections: Path, tmp_path: Path) -> None:
    (tmp_path / "inventory.yml").write_text("gpu:\n  hosts:\n    gpu-0: {}\n    gpu-1: {}\n")
    env = _env(collections, tmp_path)
    for play in ("oom.yml", "install.yml"):
        argv = [
            str(BIN / "ansible-playbook"),
            "--syntax-check",
            "-i",
            "inventory.yml",
            str(COLLECTION / "examples" / play),
        ]
        checked = _run(argv, env, tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("name", MODULES)
def test_the_old_fqcn_is_redirected_to_remediate_serving_with_a_deprecation(
    name: str, collections: Path, tmp_path: Path
) -> None:
    ran = _run([str(BIN / "ansible-doc"), "--json", f"remediate.sglang.{name}"], _env(collections, tmp_path), tmp_path)
    assert ran.returncode == 0, ran.stderr
    (doc,) = json.loads(ran.stdout).values()
    assert doc["doc"]["filename"].endswith(f"remediate/serving/plugins/modules/{name}.py")
    assert f"use remediate.serving.{name}" in ran.stderr  # the redirect's deprecation warning


def test_a_play_with_the_old_names_passes_the_syntax_check(collections: Path, tmp_path: Path) -> None:
    play = [
        {"hosts": "gpu", "roles": ["remediate.sglang.install"], "tasks": [{"remediate.sglang.oom": {"min_tokens": 1}}]}
    ]
    (tmp_path / "old.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "inventory.yml").write_text("gpu:\n  hosts:\n    gpu-0: {}\n")
    argv = [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventory.yml", "old.yml"]
    checked = _run(argv, _env(collections, tmp_path), tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    gone = [{"hosts": "gpu", "tasks": [{"remediate.sglang.nonesuch": {}}]}]  # the check does resolve names
    (tmp_path / "old.yml").write_text(yaml.safe_dump(gone))
    assert _run(argv, _env(collections, tmp_path), tmp_path).returncode != 0


def test_the_oom_example_is_a_canary_then_batches_of_25_percent_with_no_failure_tolerated() -> None:
    canary, rest = yaml.safe_load((COLLECTION / "examples" / "oom.yml").read_text())
    assert (canary["serial"], canary["max_fail_percentage"], canary["any_errors_fatal"]) == (1, 0, True)
    assert canary["hosts"].endswith("[0]") and rest["hosts"].endswith("[1:]")
    assert (rest["serial"], rest["max_fail_percentage"]) == ("25%", 0)
    (task,) = rest["tasks"]
    assert "remediate.serving.oom" in task and "throttle" in task


def _rulebook_schema() -> dict[str, Any]:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "remediate-test-wheels" / "rulebook"
    wheels = list(cache.glob(f"ansible_rulebook-{RULEBOOK_VERSION}-*.whl"))
    if not wheels:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache)]
        subprocess.run([*pip, f"ansible-rulebook=={RULEBOOK_VERSION}"], check=True, capture_output=True, timeout=300)
        wheels = list(cache.glob(f"ansible_rulebook-{RULEBOOK_VERSION}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        return json.loads(wheel.read("ansible_rulebook/schema/ruleset_schema.json"))


def test_the_rulebook_validates_against_ansible_rulebooks_schema_and_throttles_per_host() -> None:
    rulebook = yaml.safe_load((COLLECTION / "examples" / "rulebook.yml").read_text())
    jsonschema.validate(rulebook, _rulebook_schema())
    (rule,) = rulebook[0]["rules"]
    assert rule["throttle"]["once_within"] and rule["throttle"]["group_by_attributes"] == ["event.payload.event.host"]
    (source,) = rulebook[0]["sources"]
    assert "eda.builtin.webhook" in source  # builtin: nothing from Galaxy
    assert source["filters"] == [{"eda.builtin.insert_hosts_to_meta": {"host_path": "payload.event.host"}}]
    assert "run_playbook" in rule["action"]
    broken = [{**rulebook[0], "rules": [{**rule, "throttle": {"once_within": "soon"}}]}]
    with pytest.raises(jsonschema.ValidationError):  # the schema does check: a wrong throttle is refused
        jsonschema.validate(broken, _rulebook_schema())


def test_a_target_without_the_library_fails_with_missing_required_lib(collections: Path, tmp_path: Path) -> None:
    python = "/usr/bin/python3"  # the system's: ansible ships the module its own module_utils, not remediate
    probe = subprocess.run([python, "-c", "import remediate"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip(f"{python} can import remediate here")
    argv = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "remediate.serving.status",
            "-e", f"ansible_python_interpreter={python}", "-o"]  # fmt: skip
    ran = _run(argv, _env(collections, tmp_path), tmp_path)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "Failed to import the required Python library (remediate)" in ran.stdout
