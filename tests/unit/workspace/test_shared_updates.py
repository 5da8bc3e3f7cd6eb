"""Cluster-wide records written by two orchestrators at once: every writer's records are kept.

The bootstrap records, the breakers and the orphan action times of a cluster are one document
each, shared by every orchestrator of the cluster (the store's row with ``terraform.backend:
pg``, a file of the state directory otherwise). Two writers, each with its own connection (or
its own open files), record 40 records each, step by step together (a barrier before each
record, so that both are between their read and their write as often as the machine lets
them): all 80 are kept, against a real private PostgreSQL server and against the local files,
by two threads and by two processes.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.postgres import SharedStore
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import BreakerSettings, OrphanSettings
from orchestrator.orphans.limits import RateLimit
from orchestrator.reconcile.bootstraps import BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.workspace.documents import Documents, LocalDocuments
from orchestrator.workspace.shareddocs import SharedDocuments

NOW = 1_800_000_000.0
EACH = 40
WRITERS = 2

# A writer's own documents of the cluster: each call opens another connection (or file set).
Opener = Callable[[], Documents]


@pytest.fixture(params=["pg", "local"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Documents of one cluster, a fresh connection per call (pg) or a fresh object over the
    same state directory (local)."""
    if request.param == "local":
        yield lambda: LocalDocuments(tmp_path / "state")
        return
    conn_str: str = request.getfixturevalue("conn_str")
    opened: list[SharedStore] = []

    def open_documents() -> Documents:
        store = SharedStore.open(conn_str, "shared")
        opened.append(store)
        return SharedDocuments(lambda: store, "shared", "")

    try:
        yield open_documents
    finally:
        for store in opened:
            store.close()


def together(step: Callable[[int, int], None]) -> None:
    """``step(writer, i)`` for i in 0..EACH-1 in each writer's own thread, in lock step."""
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def run(writer: int) -> None:
        try:
            for i in range(EACH):
                barrier.wait(timeout=120)
                step(writer, i)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [e for e in errors if not isinstance(e, threading.BrokenBarrierError)], errors


def test_two_daemons_recording_their_hosts_keep_all_80_bootstrap_records(tmp_path: Path, opener: Opener) -> None:
    trackers = [BootstrapTracker.load(tmp_path / "state", opener()) for _ in range(WRITERS)]

    def step(writer: int, i: int) -> None:
        tracker = trackers[writer]
        record = tracker.get(f"op{writer}-{i:03d}", f"p{writer}", "cpu", f"h{writer}-{i}")
        tracker.record(record, "ok", NOW, attempts=3, backoff=Backoff(), rng=random.Random(i))

    together(step)
    kept = BootstrapTracker.load(tmp_path / "state", opener()).records()
    assert len(kept) == WRITERS * EACH
    assert all(r.ok for r in kept)


def test_two_daemons_tripping_their_templates_keep_all_80_breakers(tmp_path: Path, opener: Opener) -> None:
    settings = BreakerSettings(failures=1)
    breakers = [Breakers.load(tmp_path / "state", settings, opener()) for _ in range(WRITERS)]

    together(lambda writer, i: breakers[writer].failure(f"t{writer}-{i}", "bootstrap", "unreachable", NOW))
    states = Breakers.load(tmp_path / "state", settings, opener()).states()
    assert len(states) == WRITERS * EACH
    assert {s.position.value for s in states} == {"open"}


def test_two_scans_counting_their_actions_keep_all_80(tmp_path: Path, opener: Opener) -> None:
    settings = OrphanSettings()
    limits = [RateLimit(tmp_path / "state", settings, NOW, opener()) for _ in range(WRITERS)]

    together(lambda writer, i: limits[writer].take(f"p{writer}"))
    counted = RateLimit(tmp_path / "state", settings, NOW, opener())
    assert [counted.recent(f"p{w}") for w in range(WRITERS)] == [EACH] * WRITERS


def record_hosts(state_dir: str, writer: int, barrier: Any) -> None:
    """One process's writer: its own 40 hosts' bootstrap records, in lock step with the other."""
    tracker = BootstrapTracker.load(Path(state_dir))
    for i in range(EACH):
        barrier.wait(timeout=120)
        record = tracker.get(f"op{writer}-{i:03d}", f"p{writer}", "cpu", f"h{writer}-{i}")
        tracker.record(record, "ok", NOW, attempts=3, backoff=Backoff(), rng=random.Random(i))


def test_two_processes_on_one_state_directory_keep_all_80_bootstrap_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local guarantee holds between processes (a daemon and a command), not only threads."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3]))  # the children import this module
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(WRITERS)
    writers = [spawn.Process(target=record_hosts, args=(str(tmp_path / "state"), w, barrier)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=300)
    assert [p.exitcode for p in writers] == [0] * WRITERS
    assert len(BootstrapTracker.load(tmp_path / "state").records()) == WRITERS * EACH
