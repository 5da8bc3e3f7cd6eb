"""Durable, private files: atomic replacement that survives a crash, 0600 files in 0700 directories.

A rename is atomic but not durable until the directory holding it is fsync'd: after a power
loss the directory may still name the old file (or no file). Every atomic write of the toolkit
therefore writes a temporary sibling, fsyncs it, renames it over the target and fsyncs the
directory. What the toolkit keeps (desired sets, plan bundles, the audit log, Terraform state)
holds settings and user data, so files are created 0600 and directories 0700; a directory the
toolkit owns that is wider is tightened (with a warning), one it does not own is reported.

Only the standard library is used, so every layer may import this module, like ``errors``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

from orchestrator.errors import FinalError

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

log = logging.getLogger(__name__)


def parse_json(raw: str | bytes) -> Any:
    """``json.loads`` whose every failure on a bad document is a ValueError, as readers expect.

    ``json.loads`` raises RecursionError for arrays or objects nested a few thousand deep, which
    the ``except ValueError`` of a reader does not catch: a damaged or hostile file would be an
    internal error instead of one line naming it. (An integer of thousands of digits, bad UTF-8
    and bad syntax are ValueErrors already.)
    """
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename, a new or removed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace(src, dst)`` followed by an fsync of the directories involved."""
    source, target = Path(src), Path(dst)
    os.replace(source, target)
    fsync_dir(target.parent)
    if source.parent.resolve() != target.parent.resolve():
        fsync_dir(source.parent)


def remove(path: Path) -> None:
    """Unlink ``path`` (absent is fine) and make the removal durable."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes, mode: int = PRIVATE_FILE) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, value: Any, mode: int = PRIVATE_FILE) -> None:
    """Write ``value`` as JSON to ``path`` atomically and durably (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, json.dumps(value, indent=1, sort_keys=True).encode(), mode)


def private_dir(path: Path) -> Path:
    """Make sure ``path`` is a directory only its owner can enter (0700) and return it.

    A missing directory is created 0700 (its missing parents with the default mode: they are
    not the toolkit's). An existing one that is wider is tightened when this process owns it;
    otherwise the directory is reported (``FinalError`` naming it), because the toolkit would
    keep secrets where others can read them.
    """
    try:
        if not path.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, PRIVATE_DIR)
        info = path.stat()
    except PermissionError:
        # An unprivileged user (the systemd unit's) and a directory made by root: one line, not a traceback.
        raise denied(path) from None
    refuse_unenterable(path)
    wider = stat.S_IMODE(info.st_mode) & 0o077
    if wider:
        if info.st_uid != os.geteuid():
            raise FinalError(
                f"{path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read what the toolkit keeps "
                f"there, and it belongs to uid {info.st_uid}; make it 0700 (chmod 700 {path})"
            )
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o077)
        log.warning("%s: mode was %04o, tightened to owner only", path, stat.S_IMODE(info.st_mode))
    return path


def denied(path: Path) -> FinalError:
    """The one line for a directory this process may not create, enter or write."""
    return FinalError(
        f"{path}: permission denied: uid {os.geteuid()} cannot create or enter it; "
        "give it to the user the toolkit runs as, or choose another place"
    )


# Whether os.access can ask with the effective ids (Linux: faccessat's AT_EACCESS), which are
# the ones open() and mkdir() are checked against.
_EFFECTIVE_IDS = os.access in os.supports_effective_ids


def refuse_unenterable(path: Path) -> None:
    """``denied(path)`` when ``path`` is a directory this process cannot enter, read and write.

    A user who is not root on a state directory root made (0700): the directory itself can be
    looked at from its open parent, so only the first file below it failed, deep inside a verb,
    as ``internal error: PermissionError``. Checked first, the line names the directory to fix.
    A missing directory passes: whoever creates it reports what stops that.
    """
    try:
        present = path.is_dir()
    except PermissionError:  # a parent it cannot enter
        raise denied(path) from None
    if present and not os.access(path, os.R_OK | os.W_OK | os.X_OK, effective_ids=_EFFECTIVE_IDS):
        raise denied(path)


def permission_problem(exc: PermissionError) -> str:
    """The one line for a PermissionError no caller expected: the directory on the way to the file
    that this process cannot enter (``denied``'s line), else the file itself."""
    if exc.filename is None:
        return f"permission denied: {exc.strerror or exc}"
    target = Path(os.fsdecode(exc.filename)).absolute()
    for directory in reversed(target.parents):
        if not os.access(directory, os.X_OK, effective_ids=_EFFECTIVE_IDS):
            return str(denied(directory))
    return f"{target}: permission denied: uid {os.geteuid()} may not use it"


def seal(directory: Path) -> None:
    """Make ``directory`` and everything under it private: directories 0700, files 0600.

    Symbolic links are left alone (their targets are not ours to change)."""
    if not directory.exists():
        return
    os.chmod(directory, PRIVATE_DIR)
    for root, dirs, files in os.walk(directory):
        for name, mode in [(d, PRIVATE_DIR) for d in dirs] + [(f, PRIVATE_FILE) for f in files]:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, mode)


def private_tree(base: Path, *parts: str) -> Path:
    """``base/part1/part2/...`` with ``base`` and every component below it private (0700)."""
    current = private_dir(base)
    for part in parts:
        current = private_dir(current / part)
    return current


# -- directories that live exactly as long as the process that made them --------------------

# The lock file of an owned directory. It is created under a temporary name, locked, and only
# then renamed to this one, so whoever sees the name sees it locked while its owner lives.
OWNER_LOCK = ".owner"


class OwnedDir:
    """A fresh private directory and the ``flock`` on its lock file that marks it in use.

    The lock goes with the open file, not with a pid: it is released when the last process
    holding the descriptor ends, however it ends (``os._exit``, ``kill -9``), and a reused pid
    means nothing to it. A process started with the descriptor (``pass_fds``) keeps the
    directory in use as long as it runs. :func:`remove_stale` removes the directories whose lock
    nobody holds.
    """

    def __init__(self, parent: Path, prefix: str) -> None:
        self._closing = threading.Lock()
        self._closed = False
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))  # 0700
        fresh = self.path / f"{OWNER_LOCK}.new"
        self.lock_fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            os.write(self.lock_fd, f"{os.getpid()}\n".encode())  # for people: the lock decides
            os.rename(fresh, self.path / OWNER_LOCK)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove the directory, then let go of its lock; once (a second close would close
        whatever descriptor reused the lock's number)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            shutil.rmtree(self.path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)


def remove_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the :class:`OwnedDir` directories ``prefix*`` in ``parent`` whose owners are gone.

    Gone means nobody holds the lock. A directory without a lock file (being made this instant,
    or not made by :class:`OwnedDir`), a symbolic link and a directory of another user are left
    alone. Returns the directories removed.
    """
    removed: list[Path] = []
    try:
        entries = [e for e in parent.iterdir() if e.name.startswith(prefix)]
    except OSError:  # no such directory yet: nothing was left in it
        return removed
    for entry in entries:
        try:
            info = entry.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(entry / OWNER_LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner (or a process it handed the lock to) still runs
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry)
            removed.append(entry)
        except OSError as exc:
            log.warning("%s: left by a process that is gone, but cannot be removed: %s", entry, exc)
        finally:
            os.close(fd)
    for entry in removed:
        log.info("%s: removed, left behind by a process that is gone", entry)
    return removed
