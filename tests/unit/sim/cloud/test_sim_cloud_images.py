"""Images of the simulated cloud: snapshots of an instance's files, launches from them, deletion."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from orchestrator.sim.cloud.schema import SCHEMA_VERSION
from orchestrator.sim.cloud.store import (
    CloudApiError,
    CloudStore,
    ImageNotFound,
    InstanceNotFound,
    InvalidParameterValue,
)

OWNER = {"xce:cluster": "demo", "xce:provider": "sim"}


@pytest.fixture
def store(tmp_path: Path) -> CloudStore:
    return CloudStore(tmp_path / "sim" / "cloud.sqlite")


def _disk(store: CloudStore, instance_id: str) -> Path:
    return store.path.parent / "hosts" / instance_id / "upper"


def _builder(store: CloudStore) -> str:
    """An instance whose host wrote the node manager's files (and others an image leaves out)."""
    inst = store.create_instance("builder", "c8.large", "debian-12", OWNER, "", "bake-1")
    upper = _disk(store, inst.id)
    (upper / "etc/xce").mkdir(parents=True)
    (upper / "etc/xce/node.conf").write_text("role = worker\n")
    os.chmod(upper / "etc/xce/node.conf", 0o640)
    (upper / "opt/xce/bin").mkdir(parents=True)
    (upper / "opt/xce/bin/xce-node").write_text("#!/bin/sh\n")
    os.chmod(upper / "opt/xce/bin/xce-node", 0o755)
    (upper / "opt/xce/current").symlink_to("bin")
    (upper / "etc/hostname").write_text("builder\n")  # per host: not in an image
    return inst.id


def test_an_image_snapshots_the_xce_files_with_owner_tags_and_is_journalled(store: CloudStore) -> None:
    builder = _builder(store)
    image = store.create_image(builder, "cpu-2026-12-05", {**OWNER, "xce:template": "cpu"}, epoch="5.1")
    assert image.id.startswith("img-") and image.state == "available"
    assert (image.instance_id, image.source_image, image.name) == (builder, "debian-12", "cpu-2026-12-05")
    files = store.path.parent / "images" / image.id
    assert (files / "etc/xce/node.conf").read_text() == "role = worker\n"
    assert os.readlink(files / "opt/xce/current") == "bin"
    assert not (files / "etc/hostname").exists()
    # Listed by its tags, apart from the instances.
    assert [i.id for i in store.list_images({"xce:cluster": "demo"})] == [image.id]
    assert store.list_images({"xce:cluster": "other"}) == []
    assert [i.id for i in store.list_instances({"xce:cluster": "demo"})] == [builder]
    last = store.mutations()[-1]
    assert (last.action, last.instance_id, last.cluster, last.provider, last.epoch) == (
        "create-image",
        image.id,
        "demo",
        "sim",
        "5.1",
    )


def test_an_instance_launched_from_an_image_starts_with_its_files(store: CloudStore) -> None:
    image = store.create_image(_builder(store), "cpu", OWNER)
    inst = store.create_instance("w1", "c8.large", image.id, OWNER, "", "op-1-0")
    upper = _disk(store, inst.id)
    assert (upper / "etc/xce/node.conf").read_text() == "role = worker\n"
    assert (upper / "etc/xce/node.conf").stat().st_mode & 0o777 == 0o640
    assert (upper / "opt/xce/bin/xce-node").stat().st_mode & 0o777 == 0o755
    assert not (upper / "etc/hostname").exists()
    assert (store.path.parent / "hosts" / inst.id).stat().st_mode & 0o777 == 0o700
    # A name that is no image id is taken as it is, as before: no disk is made.
    plain = store.create_instance("w2", "c8.large", "debian-12", OWNER, "", "op-1-1")
    assert not (store.path.parent / "hosts" / plain.id).exists()


def test_a_launch_from_an_unknown_or_deleted_image_is_refused_and_leaves_nothing(store: CloudStore) -> None:
    image = store.create_image(_builder(store), "cpu", OWNER)
    assert store.delete_image(image.id, epoch="5.2")
    hosts_before = sorted(p.name for p in (store.path.parent / "hosts").iterdir())
    for name in (image.id, "img-000000000000"):
        with pytest.raises(InvalidParameterValue, match=f"InvalidAMIID.NotFound: no available image {name}"):
            store.create_instance("w", "c8.large", name, OWNER, "", "op-2-0")
    assert sorted(p.name for p in (store.path.parent / "hosts").iterdir()) == hosts_before
    assert len(store.list_instances()) == 1  # the builder only


def test_deleting_an_image_removes_its_files_and_keeps_its_record(store: CloudStore) -> None:
    image = store.create_image(_builder(store), "cpu", OWNER)
    launched = store.create_instance("w1", "c8.large", image.id, OWNER, "", "op-1-0")
    assert store.delete_image(image.id, epoch="5.2")
    assert not store.delete_image(image.id)  # idempotent
    assert not (store.path.parent / "images" / image.id).exists()
    gone = store.get_image(image.id)
    assert gone is not None and gone.state == "deleted" and gone.deleted_at
    assert store.list_images(OWNER) == []
    assert [i.id for i in store.list_images(OWNER, include_deleted=True)] == [image.id]
    # An instance started from it keeps its own copy.
    assert (_disk(store, launched.id) / "etc/xce/node.conf").exists()
    assert [(m.action, m.epoch) for m in store.mutations() if m.instance_id == image.id] == [
        ("create-image", ""),
        ("delete-image", "5.2"),
    ]


def test_a_deletion_never_names_a_directory_outside_the_images(store: CloudStore) -> None:
    victim = store.path.parent / "images" / "keep"
    victim.mkdir(parents=True)
    for hostile in ("../hosts", "keep", "img-../../x", ""):
        assert not store.delete_image(hostile)
    assert victim.is_dir() and store.path.exists()


def test_an_image_needs_a_live_instance_and_a_name(store: CloudStore) -> None:
    builder = _builder(store)
    with pytest.raises(InvalidParameterValue, match="needs a name"):
        store.create_image(builder, "", OWNER)
    store.stop(builder)
    assert store.create_image(builder, "from-stopped", OWNER).state == "available"
    store.delete(builder)
    with pytest.raises(InstanceNotFound):
        store.create_image(builder, "cpu", OWNER)
    # The refused snapshot left no files behind.
    assert len(list((store.path.parent / "images").iterdir())) == 1


def test_an_instance_with_no_host_yet_gives_an_empty_image(store: CloudStore) -> None:
    inst = store.create_instance("fresh", "c8.large", "debian-12", OWNER, "", "t")
    image = store.create_image(inst.id, "empty", OWNER)
    assert list((store.path.parent / "images" / image.id).iterdir()) == []


def test_image_tags_update_in_place(store: CloudStore) -> None:
    image = store.create_image(_builder(store), "cpu", OWNER)
    assert store.update_image_tags(image.id, {**OWNER, "k": "v"}, epoch="6.1").tags == {**OWNER, "k": "v"}
    assert [i.id for i in store.list_images({"k": "v"})] == [image.id]
    assert (store.mutations()[-1].action, store.mutations()[-1].epoch) == ("update-image-tags", "6.1")
    store.delete_image(image.id)
    with pytest.raises(ImageNotFound):
        store.update_image_tags(image.id, OWNER)


def test_image_calls_through_the_api_fail_at_the_error_rate(store: CloudStore) -> None:
    builder = _builder(store)
    api = CloudStore(store.path, api_faults=True)
    store.set_error_rate(1.0)
    with pytest.raises(CloudApiError, match="during create-image"):
        api.create_image(builder, "cpu", OWNER)
    assert not (store.path.parent / "images").exists()  # refused before any file was written


def test_a_schema_4_store_gets_the_images_table(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    CloudStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE images")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema'")
    store = CloudStore(path)
    assert store.list_images() == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)


@pytest.mark.skipif(os.geteuid() != 0, reason="owners and device nodes need root")
def test_owners_are_kept_and_special_files_left_out_as_root(store: CloudStore) -> None:
    builder = _builder(store)
    upper = _disk(store, builder)
    os.chown(upper / "etc/xce/node.conf", 4321, 4321)
    os.mknod(upper / "etc/xce/whiteout", 0o600 | 0o020000, os.makedev(0, 0))  # an overlay whiteout
    image = store.create_image(builder, "cpu", OWNER)
    inst = store.create_instance("w1", "c8.large", image.id, OWNER, "", "op-1-0")
    conf = _disk(store, inst.id) / "etc/xce/node.conf"
    assert (conf.stat().st_uid, conf.stat().st_gid) == (4321, 4321)
    assert not (_disk(store, inst.id) / "etc/xce/whiteout").exists()
    assert not (store.path.parent / "images" / image.id / "etc/xce/whiteout").exists()
