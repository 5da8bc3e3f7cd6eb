"""Build the node manager artifact: a tarball unpacked into ``/opt/xce`` on simulated hosts.

Not shipped in the artifact itself. The tarball is reproducible (sorted members, fixed times
and owners), so the bootstrap role's copy is idempotent across builds of the same tree.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import platform
import sys
import tarfile
from pathlib import Path

ARTIFACT_NAME = "xce-node-manager-sim.tar.gz"
PACKAGE = "xce_node_manager"
RUNTIME_MODULES = (
    "__init__.py",
    "__main__.py",
    "codes.py",
    "config.py",
    "joinresult.py",
    "manager.py",
    "worker.py",
    "wire.py",
)

ENTRY_SCRIPT = '''#!/usr/bin/env python3
"""xce-node-manager (simulated): see lib/xce_node_manager/__init__.py. Needs only python3."""
import json
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
LIB = os.path.join(os.path.dirname(HERE), "lib")
with open(os.path.join(os.path.dirname(HERE), "MANIFEST.json"), encoding="utf-8") as f:
    WANT = json.load(f)["python_abi"]
HAVE = sys.implementation.cache_tag
if HAVE != WANT:
    sys.exit("xce-node-manager: this artifact bundles pycapnp for %s, but %s is %s"
             % (WANT, sys.executable, HAVE))
sys.path.insert(0, LIB)
from xce_node_manager.manager import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
'''


def schema_path() -> Path:
    """The package's ``provisioner.capnp`` (read as a file: never loaded in this process)."""
    return Path(__file__).resolve().parents[2] / "protocol" / "provisioner.capnp"


def _pycapnp_dir() -> Path:
    spec = importlib.util.find_spec("capnp")
    if spec is None or spec.origin is None:
        raise RuntimeError("pycapnp is not installed in this environment; cannot build the artifact")
    return Path(spec.origin).parent


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = 0
    info.uname = info.gname = "root"
    tar.addfile(info)


def build(dest: Path) -> Path:
    """Write ``dest/xce-node-manager-sim.tar.gz``; returns its path."""
    here = Path(__file__).resolve().parent
    schema = schema_path()
    if not schema.is_file():
        raise RuntimeError(f"protocol schema not found at {schema}")
    capnp_dir = _pycapnp_dir()
    members: dict[str, tuple[bytes, int]] = {}
    for module in RUNTIME_MODULES:
        members[f"lib/{PACKAGE}/{module}"] = ((here / module).read_bytes(), 0o644)
    schema_bytes = schema.read_bytes()
    members[f"lib/{PACKAGE}/provisioner.capnp"] = (schema_bytes, 0o644)
    for path in sorted(capnp_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(capnp_dir.parent).as_posix()
            members[f"lib/{rel}"] = (path.read_bytes(), 0o755 if path.suffix == ".so" else 0o644)
    members["bin/xce-node-manager"] = (ENTRY_SCRIPT.encode(), 0o755)
    manifest = {
        "name": "xce-node-manager-sim",
        "python_abi": sys.implementation.cache_tag,
        "machine": platform.machine(),
        "pycapnp": importlib.metadata.version("pycapnp"),
        "schema_sha256": hashlib.sha256(schema_bytes).hexdigest(),
        "entry": "bin/xce-node-manager",
    }
    members["MANIFEST.json"] = (json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n", 0o644)

    dirs = sorted({str(Path(name).parent) for name in members} - {"."})
    all_dirs: set[str] = set()
    for d in dirs:
        parts = Path(d).parts
        all_dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / ARTIFACT_NAME
    tmp = out.with_name(out.name + ".tmp")
    with (
        open(tmp, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="", compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for d in sorted(all_dirs):
            _add_dir(tar, d)
        for name in sorted(members):
            data, mode = members[name]
            _add(tar, name, data, mode)
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.sim.nodemanager.artifact DEST_DIR``: build and print the tarball's path."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m orchestrator.sim.nodemanager.artifact DEST_DIR", file=sys.stderr)
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
