"""The worker of one request: a detached process that carries its op out, then ends.

``requestMachines`` and ``requestReturnMachines`` record an op's intent and return; the worker
(``xceprov provider work``, started with :func:`spawn_worker` in a session of its own, its job on
stdin, its output in ``<state_dir>/contract/workers/<request id>.log``) takes the provider's
fence and completes the op with the resume every open op has
(:meth:`orchestrator.ops.executor.Executor.resume_op`: apply the desired set and record the instances, or
delete the returned ones); then, with the fence released, it runs the bootstrap play on the
op's new hosts. It keeps its progress in the request's record (``requests``): each host's
creation time and bootstrap outcome, and its own state. While another holder has the fence (a
daemon on the provider, a command) it waits, up to :data:`WORKER_WAIT`; a daemon holding the
lease resumes the open op itself. A worker that finds its op no longer open has nothing to do.
A request has one worker at a time (:mod:`.workerlock`): a second one started while the first
runs ends at once, having written nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import durable
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ContractRefused, LeaseHeld, XceprovError
from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.ops.executor import Bootstrap, Created
from orchestrator.ops.openops import open_ops
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.contract import workerlock
from orchestrator.services.contract.answers import one_line
from orchestrator.services.contract.requests import RequestRecord, RequestRecords
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.ops import playbook_callables

# How long a worker waits for the fence another holder has before it gives up (its op stays
# open: the request's next getRequestStatus starts its worker again; ``xceprov ops resume`` or a
# daemon completes it too).
WORKER_WAIT = 3600.0
WORKER_RETRY = 2.0
ACTIVE_STATES = ("started", "running", "waiting")


def worker_log(config_state_dir: Path, request_id: str) -> Path:
    """Where the worker of ``request_id`` writes its output."""
    return config_state_dir / "contract" / "workers" / f"{request_id}.log"


def job_document(loaded: LoadedConfig, request_id: str, lock: int | None = None) -> bytes:
    """What a worker reads on its stdin: the configuration as validated here, the request, and
    the descriptor of the request's worker lock it inherits (:mod:`.workerlock`), if any."""
    job = {
        "request": request_id,
        "lock_fd": lock,
        "config": loaded.config.model_dump(mode="json"),
        "source": loaded.source,
        "base_dir": str(loaded.base_dir),
    }
    return json.dumps(job).encode()


def spawn_worker(loaded: LoadedConfig, request_id: str) -> int:
    """Start the worker of ``request_id`` detached (own session, output to its log); its pid, or
    0 when a worker of the request already runs (its lock is held: :mod:`.workerlock`).

    The configuration goes over stdin as this process validated it (paths already resolved),
    so the worker works on exactly the same one, whatever file or directory it would find. The
    request's worker lock is claimed here and handed to the worker as an inherited descriptor,
    so no second worker of the request can start between this spawn and the worker's end.
    """
    state_dir = loaded.config.state_dir
    lock = workerlock.claim(state_dir, request_id)
    if lock is None:
        return 0
    try:
        log = worker_log(state_dir, request_id)
        command = [sys.executable, "-m", "orchestrator.cli", "provider", "work"]
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, durable.PRIVATE_FILE)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=fd,
                stderr=fd,
                cwd=loaded.base_dir,
                start_new_session=True,
                close_fds=True,
                pass_fds=(lock,),
            )
        finally:
            os.close(fd)
    finally:
        os.close(lock)  # the worker holds the lock now (or, when the spawn failed, nobody)
    assert process.stdin is not None
    with process.stdin:
        process.stdin.write(job_document(loaded, request_id, lock))
    return process.pid


@dataclass(frozen=True)
class Job:
    """What a worker was started with (see :func:`job_document`)."""

    loaded: LoadedConfig
    request_id: str
    lock_fd: int | None = None


def read_job(raw: bytes) -> Job:
    """The job a worker was started with (see :func:`job_document`)."""
    from orchestrator.model.config import Config

    try:
        job = durable.parse_json(raw)
        config = Config.model_validate(job["config"])
        lock = job.get("lock_fd")
        if lock is not None and (isinstance(lock, bool) or not isinstance(lock, int) or lock < 3):
            raise ValueError(f"lock_fd {lock!r} is not an inherited descriptor")
        loaded = LoadedConfig(config, str(job["source"]), Path(job["base_dir"]))
        return Job(loaded, str(job["request"]), lock)
    except (ValueError, KeyError, TypeError) as exc:
        raise ContractRefused(f"provider work: not a worker's job on stdin: {one_line(str(exc))[:200]}") from None


def worker_alive(record: RequestRecord) -> bool:
    """Whether the record's worker is still at work (its process exists on this machine)."""
    if record.worker_state not in ACTIVE_STATES or record.worker_pid <= 0:
        return False
    try:
        os.kill(record.worker_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _recording(records: RequestRecords, request_id: str, boot: Bootstrap | None, session: ContractSession) -> Bootstrap:
    """The executor's bootstrap step, keeping each host's creation time and outcome in the record."""

    def step(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        now = session.clock()
        current = records.read(request_id)
        launched = {**(current.launched if current else {}), **{c.name: now for c in created}}
        records.update(request_id, launched=launched)
        outcomes = dict(boot(provider, created)) if boot is not None else {}
        current = records.read(request_id)
        if current is not None and outcomes:
            records.update(request_id, hosts={**current.hosts, **outcomes})
        return outcomes

    return step


def _created(facts: Sequence[Fact], request_id: str) -> list[Created]:
    """The instances the op of ``request_id`` created and that still exist, from its facts."""
    gone = {f.instance_key for f in facts if f.kind in GONE_KINDS}
    return [
        Created(f.instance_key, f.instance_id, f.host_name, f.address, f.template, f.join_deadline)
        for f in facts
        if f.kind == FactKind.EXPECTED_HOST and f.op_id == request_id and f.instance_key not in gone
    ]


def carry_out(
    session: ContractSession, request_id: str, world: SimulatedWorld | None = None, lock_fd: int | None = None
) -> RequestRecord | None:
    """Complete the op of ``request_id`` (see the module docstring); its record at the end, or
    None, with nothing done or written, when another worker of the request runs (its lock is
    held: :mod:`.workerlock`; ``lock_fd`` is the lock a starter handed over).
    """
    with workerlock.exclusive(session.loaded.config.state_dir, request_id, lock_fd) as mine:
        return _carry_out(session, request_id, world) if mine else None


def _carry_out(session: ContractSession, request_id: str, world: SimulatedWorld | None) -> RequestRecord:
    """The work of :func:`carry_out`, under the request's worker lock.

    The fence is held for the op (the apply), not for the bootstrap that follows: the play
    reaches hosts over SSH and changes no cloud, and a request sent meanwhile on the same
    provider should not wait for it.
    """
    records = session.records
    record = records.read(request_id)
    if record is None:
        raise ContractRefused(f"provider work: no request {request_id}", "unknown_request")
    records.update(request_id, worker_pid=os.getpid(), worker_state="running", message="")
    boot, decommission = playbook_callables(session.loaded, session.root, world)
    deadline = session.monotonic() + WORKER_WAIT
    while True:
        try:
            created: dict[str, list[Created]] = {}
            with session.fenced(record.providers, wait=0, decommission=decommission) as (executor, parts):
                records.update(request_id, worker_state="running", message="")
                done = 0
                for provider in record.providers:
                    for op in open_ops(parts.facts.facts(provider)):
                        if op.op_id == request_id:
                            executor.resume_op(op)
                            done += 1
                    if record.kind == "create" and done:
                        created[provider] = _created(parts.facts.facts(provider), request_id)
            break
        except LeaseHeld as exc:
            if session.monotonic() >= deadline:
                _updated(records, request_id, worker_state="failed", message=one_line(str(exc)))
                raise
            records.update(request_id, worker_state="waiting", message=one_line(str(exc)))
            session.sleep(WORKER_RETRY)
        except XceprovError as exc:
            _updated(records, request_id, worker_state="failed", message=one_line(str(exc)))
            raise
    step = _recording(records, request_id, boot if record.bootstrap else None, session)
    try:
        for provider, made in created.items():
            if made:
                step(provider, made)
    except XceprovError as exc:
        _updated(records, request_id, worker_state="failed", message=one_line(f"bootstrap: {exc}"))
        raise
    message = "op completed" if done else "op already complete"
    return _updated(records, request_id, worker_state="done", message=message)


def _updated(records: RequestRecords, request_id: str, **changes: object) -> RequestRecord:
    record = records.update(request_id, **changes)
    if record is None:
        raise ContractRefused(f"provider work: the record of request {request_id} is gone", "unknown_request")
    return record
