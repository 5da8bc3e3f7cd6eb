"""Images of the simulated cloud: snapshots of an instance's files, from which new instances start.

The cloud here is also the hypervisor: an instance's disk is its simulated host's directory
``<store dir>/hosts/<instance-id>/``, whose ``upper/<dir>`` layers hold what the host wrote over
the machine's /etc, /opt, ... (``orchestrator/sim/hosts/host.py``). An image holds the files of
``IMAGE_PATHS`` of that disk (/etc/xce and /opt/xce: the node manager, its configuration and
the software a bake installs; /var/lib/cloud/scripts: the boot hook a bake installs, run by
cloud-init's ``scripts_per_boot`` at every boot of a host started from the image), copied to
``<store dir>/images/<image-id>/``:

- made from a running or stopped instance (a running one is copied as it is at that moment, like
  a snapshot without a reboot); an instance whose host never booted gives an empty image;
- an instance whose ``image`` names an available image (``img-...``) starts with those files in
  place: its disk is seeded before the launch is recorded, so its host's first boot finds them
  (files only, not their owners when not run as root; special files, such as the overlay's
  whiteouts, are left out);
- deleting an image removes its files; its row stays, ``deleted``, like a terminated instance.

The files are written before the row (and removed after it), so a crash in between leaves at
most a directory no row names, never a row without its files.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from orchestrator.sim.cloud import rows as rows_mod
from orchestrator.sim.cloud.errors import InvalidParameterValue
from orchestrator.sim.cloud.records import AVAILABLE, Image

# What an image holds of an instance's disk (paths under the host's root).
IMAGE_PATHS: Final = ("etc/xce", "opt/xce", "var/lib/cloud/scripts")
HOSTS_DIR: Final = "hosts"
IMAGES_DIR: Final = "images"

# An image id, the only kind of ``image`` value that names a stored image.
IMAGE_ID: Final = re.compile(r"img-[0-9a-f]{12}")

COLUMNS: Final = "id, name, instance_id, source_image, created_at, state, deleted_at"


def new_id() -> str:
    """A fresh image id (``img-`` and 12 hex digits)."""
    return "img-" + secrets.token_hex(6)


def image_dir(root: Path, image_id: str) -> Path:
    """Where the files of ``image_id`` live (``root``: the store's directory)."""
    return root / IMAGES_DIR / image_id


def disk_dir(root: Path, instance_id: str) -> Path:
    """The disk of ``instance_id``: its simulated host's directory."""
    return root / HOSTS_DIR / instance_id


def snapshot(root: Path, instance_id: str, image_id: str) -> None:
    """Copy ``IMAGE_PATHS`` of the instance's disk into the image's directory (made whole, then renamed)."""
    final = image_dir(root, image_id)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True, mode=0o700)
    for rel in IMAGE_PATHS:
        src = disk_dir(root, instance_id) / "upper" / rel
        if src.is_dir():
            _copy_tree(src, tmp / rel)
    tmp.rename(final)


def seed(root: Path, image_id: str, instance_id: str) -> None:
    """Put the image's files in place on a new instance's disk, before its host first boots."""
    disk = disk_dir(root, instance_id)
    disk.mkdir(parents=True, exist_ok=True)
    os.chmod(disk, 0o700)  # as the host manager makes it: a disk is root's alone
    for rel in IMAGE_PATHS:
        src = image_dir(root, image_id) / rel
        if src.is_dir():
            _copy_tree(src, disk / "upper" / rel)


def remove_files(root: Path, image_id: str) -> None:
    """Remove an image's files (already gone is fine; what is no image id names no directory)."""
    if IMAGE_ID.fullmatch(image_id):
        shutil.rmtree(image_dir(root, image_id), ignore_errors=True)


def check_launchable(conn: sqlite3.Connection, image: str) -> bool:
    """Whether ``image`` names a stored image (then it must be available); other names are free text."""
    if not IMAGE_ID.fullmatch(image):
        return False
    row = conn.execute("SELECT state FROM images WHERE id = ?", (image,)).fetchone()
    if row is None or row[0] != AVAILABLE:
        raise InvalidParameterValue(f"InvalidAMIID.NotFound: no available image {image}")
    return True


def select(conn: sqlite3.Connection, where: str, params: list[object]) -> list[Image]:
    """The images matching ``where`` (over ``images m``) with their tags, oldest first."""
    rows = conn.execute(
        f"SELECT {', '.join('m.' + c.strip() for c in COLUMNS.split(','))} FROM images m WHERE {where} ORDER BY m.seq",
        params,
    ).fetchall()
    tags = rows_mod.tags_of(conn, "images m", "m", where, params)
    return [
        Image(
            id=str(iid),
            name=str(name),
            instance_id=str(instance),
            source_image=str(source),
            tags=tags.get(str(iid), {}),
            created_at=str(created),
            state=str(state),  # type: ignore[arg-type]
            deleted_at=str(deleted),
        )
        for iid, name, instance, source, created, state, deleted in rows
    ]


def where(tag_filter: Mapping[str, str] | None, include_deleted: bool) -> tuple[str, list[object]]:
    """The ``WHERE`` clause (over ``images m``) and its parameters of a listing."""
    clauses: list[str] = [] if include_deleted else [f"m.state = '{AVAILABLE}'"]
    params: list[object] = []
    for key, value in (tag_filter or {}).items():
        clauses.append("EXISTS (SELECT 1 FROM tags f WHERE f.instance_id = m.id AND f.key = ? AND f.value = ?)")
        params.extend((key, value))
    return (" AND ".join(clauses) or "1"), params


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy ``src`` into ``dst`` (merged over what is there): modes and times, owners when root;
    symlinks as links; special files left out."""
    shutil.copytree(src, dst, symlinks=True, ignore=_special_files, dirs_exist_ok=True)
    if os.geteuid() != 0:
        return
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        for name in ["", *dirnames, *filenames]:
            st = os.lstat(Path(dirpath) / name)
            target = dst / rel / name
            if target.exists() or target.is_symlink():
                os.lchown(target, st.st_uid, st.st_gid)


def _special_files(directory: str, names: list[str]) -> set[str]:
    kept = (stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK)
    return {n for n in names if not any(test(os.lstat(os.path.join(directory, n)).st_mode) for test in kept)}
