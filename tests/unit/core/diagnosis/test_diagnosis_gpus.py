"""nvidia-smi's GPUs and processes with their UUIDs, and which processes are the server's neighbours: only
those on a GPU the server uses (two instances of a template on the two halves of an 8-GPU host)."""

from __future__ import annotations

from remediate.core.diagnosis.gpus import (
    Gpu,
    foreign_apps,
    parse_apps,
    parse_gpus,
    process_tree,
    server_gpus,
    visible_uuids,
)

U = [f"GPU-5a7e0c1d-{g:04x}-4b2e-9f3a-00000000{g:04x}" for g in range(8)]
GPUS = [f"{g}, {U[g]}, 97865, 90000" for g in range(8)]
PS = ["  100     1", "  101   100", "  200     1", "  201   200", "  555     1"]


def _apps(*rows: tuple[int, int, int]) -> list[str]:
    return [f"{pid}, {mib}, {U[g]}" for pid, mib, g in rows]


def test_new_and_old_query_forms_parse() -> None:
    (gpu,) = parse_gpus([GPUS[3]])
    assert (gpu.index, gpu.uuid, gpu.total_bytes) == (3, U[3], 97865 << 20)
    assert gpu.to_dict()["uuid"] == U[3]
    (old,) = parse_gpus(["0, 81559, 100"])  # an nvidia-smi asked the older fields
    assert old.uuid == "" and old.to_dict()["uuid"] is None and old.used_bytes == 100 << 20
    assert parse_gpus(["1, [N/A], 97865, 3"])[0].uuid == ""  # a UUID it cannot tell
    assert parse_gpus(["1, GPU-x, [N/A], 3", 'Field "uuid" is not a valid field to query.']) == ()
    (app,) = parse_apps([f"101, 500, {U[2]}"])
    assert (app.pid, app.used_bytes, app.gpu_uuid) == (101, 500 << 20, U[2])
    assert parse_apps(["101, 500"])[0].gpu_uuid == ""
    assert parse_apps(["101, 500, [N/A]"])[0].gpu_uuid == ""
    assert parse_apps([f"101, [N/A], {U[0]}", "bad", ""]) == ()


def test_a_sibling_instance_on_other_gpus_is_not_a_neighbour() -> None:
    # sglang@0-3 (MainPID 100) on GPUs 0-3, sglang@4-7 (MainPID 200) on GPUs 4-7
    apps = parse_apps(_apps(*[(101, 90000, g) for g in range(4)], *[(201, 90000, g) for g in range(4, 8)]))
    tree = process_tree(PS, 100)
    assert server_gpus(apps, tree, None) == frozenset(U[:4])
    assert foreign_apps(apps, tree) == ()
    assert foreign_apps(apps, process_tree(PS, 200)) == ()


def test_a_process_on_the_same_gpu_is_still_a_neighbour() -> None:
    apps = parse_apps(_apps((101, 90000, 0), (101, 90000, 1), (555, 2048, 1), (201, 90000, 4)))
    foreign = foreign_apps(apps, process_tree(PS, 100))
    assert [(a.pid, a.gpu_uuid) for a in foreign] == [(555, U[1])]


def test_a_server_on_no_gpu_falls_back_to_cuda_visible_devices_then_to_every_gpu() -> None:
    gpus = parse_gpus(GPUS)
    apps = parse_apps(_apps((201, 90000, 4), (201, 90000, 5), (555, 2048, 0)))
    tree = process_tree(PS, 100)  # restarted, still loading: nothing on a GPU yet
    visible = visible_uuids("0,1,2,3", gpus)
    assert visible == frozenset(U[:4])
    assert [a.pid for a in foreign_apps(apps, tree, visible)] == [555]
    # no CUDA_VISIBLE_DEVICES: every GPU may be the server's (conservative)
    assert [a.pid for a in foreign_apps(apps, tree)] == [201, 201, 555]
    assert foreign_apps(apps, frozenset(), visible) == ()  # the tree unknown: nothing attributed


def test_rows_without_their_gpu_are_counted() -> None:
    apps = parse_apps(["101, 90000", "201, 90000"])  # the older query: no GPU to tell them apart
    assert [a.pid for a in foreign_apps(apps, process_tree(PS, 100))] == [201]


def test_visible_uuids_reads_cuda_visible_devices_as_cuda_does() -> None:
    gpus = parse_gpus(GPUS)
    assert visible_uuids(None, gpus) is None
    assert visible_uuids("4, 5", gpus) == frozenset(U[4:6])
    assert visible_uuids(f"{U[6][:12]},7", gpus) is None  # a prefix every GPU shares: ambiguous
    assert visible_uuids(f"{U[6]},7", gpus) == frozenset(U[6:8])
    assert visible_uuids("2,x,3", gpus) == frozenset({U[2]})  # CUDA stops at the first invalid entry
    assert visible_uuids("9", gpus) is None and visible_uuids("", gpus) is None
    assert visible_uuids("MIG-1234", gpus) is None
    assert visible_uuids("0", (Gpu(0, 1, 1),)) is None  # GPUs read without UUIDs
