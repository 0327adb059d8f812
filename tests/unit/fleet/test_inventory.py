"""inventory.yaml parsing, validation (file:line:key), selection and retry-file round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.errors import ConfigError
from remediate.fleet.inventory import adhoc_host, dump_inventory, load_inventory, parse_inventory, parse_target

ROOT = Path(__file__).resolve().parents[3]

NATIVE = """\
defaults:
  user: root
  target_tokens: 200000
hosts:
  gpu-1: {address: 127.0.0.1}
  gpu-2:
    address: 127.0.0.2
    mem_fraction_static: 0.92
  cpu-1: {address: 127.0.0.3, user: deploy, sudo: true}
groups:
  gpus: [gpu-1, gpu-2]
  everything: [gpus, cpu-1]
rollout:
  canary: 1
  batch: "1,50%"
"""


def test_example_inventory_is_valid() -> None:
    inv = load_inventory(ROOT / "inventory.yaml")
    assert list(inv.hosts)[:2] == ["gpu-a01", "gpu-a02"]
    assert [h.name for h in inv.select(["kimi"])] == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-b01", "gpu-b02"]
    assert inv.hosts["gpu-a03"].settings["mem_fraction_static"] == 0.92
    assert inv.hosts["gpu-b01"].settings["sudo"] is True


def test_selection_by_name_group_glob_all_and_address_keeps_file_order() -> None:
    inv = parse_inventory(NATIVE, "inv.yaml")
    assert [h.name for h in inv.select(["all"])] == ["gpu-1", "gpu-2", "cpu-1"]
    assert [h.name for h in inv.select(["gpu-2", "gpu-1"])] == ["gpu-1", "gpu-2"]
    assert [h.name for h in inv.select(["gpu-*"])] == ["gpu-1", "gpu-2"]
    assert [h.name for h in inv.select(["everything"])] == ["gpu-1", "gpu-2", "cpu-1"]
    adhoc = inv.select(["deploy@10.9.9.9:2222"])
    assert adhoc[0].name == "deploy@10.9.9.9:2222" and adhoc[0].address == "10.9.9.9"
    assert adhoc[0].target == "deploy@10.9.9.9:2222"
    # what to do comes from the defaults; how to connect from the target (and ssh_config), not defaults.user
    assert adhoc[0].settings == {"target_tokens": 200000, "user": "deploy", "port": 2222}
    assert inv.select(["gpu-alias"])[0].target == "gpu-alias"
    assert inv.hosts["cpu-1"].target == "deploy@127.0.0.3"
    assert inv.hosts["gpu-2"].settings == {"user": "root", "target_tokens": 200000, "mem_fraction_static": 0.92}


def test_unmatched_glob_is_an_error() -> None:
    inv = parse_inventory(NATIVE, "inv.yaml")
    with pytest.raises(ConfigError, match="matches no host"):
        inv.select(["db-*"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts:\n  a:\n    adress: 1.2.3.4\n", "inv.yaml: line 3: unknown key 'adress'"),
        ("hosts:\n  a:\n    port: ssh\n", "inv.yaml: line 3: port must be int"),
        ("hosts:\n  a:\n    port: 70000\n", "inv.yaml: line 3: port 70000 is not a TCP port"),
        ("defaults:\n  mem_fraction_static: 1.5\nhosts:\n  a: {}\n", "inv.yaml: line 2: mem_fraction_static"),
        ("hosts:\n  a: {}\ngroups:\n  g: [a, b]\n", "inv.yaml: line 4: group 'g' names 'b'"),
        ("hosts:\n  a: {}\nrollout:\n  serial: 2\n", "inv.yaml: line 4: unknown rollout key 'serial'"),
        ("hosts: [a, b]\n", "inv.yaml: line 1: hosts: must map"),
        ("hosts:\n  a: {}\n  a: {}\n", "inv.yaml: line 3: duplicate key 'a'"),
        ("hosts:\n  a: {address: [x\n", "inv.yaml: line"),
        ("", "inv.yaml: inventory is empty"),
        ("colour: red\nhosts:\n  a: {}\n", "inv.yaml: line 1: unknown top-level key 'colour'"),
    ],
)
def test_validation_errors_name_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_inventory(text, "inv.yaml")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_ansible_inventory() -> None:
    text = """\
all:
  vars:
    ansible_user: root
  hosts:
    gpu-x:
      ansible_host: 127.0.0.9
      ansible_port: 2222
  children:
    rack1:
      vars:
        ansible_ssh_private_key_file: /keys/rack1
      hosts:
        gpu-y: {ansible_host: 127.0.0.10}
        gpu-z: {ansible_host: 127.0.0.11, ansible_user: deploy}
"""
    inv = parse_inventory(text, "hosts.yml")
    assert [h.name for h in inv.select(["all"])] == ["gpu-x", "gpu-y", "gpu-z"]
    assert inv.hosts["gpu-x"].target == "root@127.0.0.9:2222"
    assert inv.hosts["gpu-y"].settings["identity"] == "/keys/rack1"
    assert inv.hosts["gpu-z"].target == "deploy@127.0.0.11"
    assert [h.name for h in inv.select(["rack1"])] == ["gpu-y", "gpu-z"]


def test_retry_file_round_trips_settings() -> None:
    inv = parse_inventory(NATIVE, "inv.yaml")
    again = parse_inventory(dump_inventory(inv, ["gpu-2", "cpu-1"]), "retry.yaml")
    assert list(again.hosts) == ["gpu-2", "cpu-1"]
    assert again.hosts["gpu-2"].settings == inv.hosts["gpu-2"].settings
    assert again.hosts["cpu-1"].target == inv.hosts["cpu-1"].target


@pytest.mark.parametrize(
    ("target", "parsed", "rendered"),
    [
        ("gpu-01", (None, "gpu-01", None), "gpu-01"),
        ("root@10.0.0.1", ("root", "10.0.0.1", None), "root@10.0.0.1"),
        ("root@127.0.0.1:2222", ("root", "127.0.0.1", 2222), "root@127.0.0.1:2222"),
        ("[fe80::1]:22", (None, "fe80::1", 22), "[fe80::1]:22"),
        ("fe80::1", (None, "fe80::1", None), "[fe80::1]"),
    ],
)
def test_targets(target: str, parsed: tuple, rendered: str) -> None:
    assert parse_target(target) == parsed
    assert adhoc_host(target).target == rendered


@pytest.mark.parametrize("bad", ["root@", "host:ssh", "host:70000"])
def test_bad_targets(bad: str) -> None:
    with pytest.raises(ConfigError, match="target"):
        parse_target(bad)
