"""The cloud's own copy of an instance's user data, as the host boots with it.

What the API reports as an instance's ``user_data`` (and so what Terraform reads back, lists and
stores) is what the launch request gave. A launch may also hand the cloud files that only the
host gets: the ``xcesim`` provider adds a first-boot host's join token (``/etc/xce/join-token``,
0600) from its ephemeral configuration (docs/bootstrap.md, "First boot"). The cloud keeps that
copy in the table ``boot_user_data``, which no API call returns (only the host manager reads it
to boot the host), and forgets it when the instance is terminated. Like EC2, which holds user
data in clear for the instance's life, the simulated cloud is trusted with it.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import yaml

from orchestrator.model.firstboot import JOIN_TOKEN_FILE, JOIN_TOKEN_MODE

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS boot_user_data (
    instance_id TEXT PRIMARY KEY,
    user_data   TEXT NOT NULL
);
"""

CLOUD_CONFIG: Final = "#cloud-config"


def with_join_token(user_data: str, token: str) -> str:
    """``user_data`` (``#cloud-config``) with a ``write_files`` entry writing ``token`` to the
    join token file, mode 0600. ``ValueError`` when the user data is no cloud-config mapping."""
    if not user_data.lstrip("\ufeff").startswith(CLOUD_CONFIG):
        raise ValueError("user data of a first-boot instance must be #cloud-config")
    try:
        data: Any = yaml.safe_load(user_data)
    except yaml.YAMLError as exc:
        raise ValueError(f"user data is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("user data is not a cloud-config mapping")
    files = data.get("write_files") or []
    if not isinstance(files, list):
        raise ValueError("user data's write_files is not a list")
    entry = {"path": JOIN_TOKEN_FILE, "permissions": JOIN_TOKEN_MODE, "owner": "root:root", "content": token + "\n"}
    data["write_files"] = [*files, entry]
    return CLOUD_CONFIG + "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def keep(conn: sqlite3.Connection, instance_id: str, user_data: str) -> None:
    """Keep ``user_data`` as the copy ``instance_id`` boots with (inside the launch's transaction)."""
    conn.execute(
        "INSERT OR REPLACE INTO boot_user_data(instance_id, user_data) VALUES (?, ?)", (instance_id, user_data)
    )


def forget(conn: sqlite3.Connection, instance_id: str) -> None:
    """The instance is terminated: its boot copy goes (inside the termination's transaction)."""
    conn.execute("DELETE FROM boot_user_data WHERE instance_id = ?", (instance_id,))


def copies(conn: sqlite3.Connection) -> dict[str, str]:
    """Instance id -> the boot copy, for every live instance that has one."""
    rows = conn.execute(
        "SELECT b.instance_id, b.user_data FROM boot_user_data b JOIN instances i ON i.id = b.instance_id "
        "WHERE i.state != 'terminated'"
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}
