"""The simulated cloud's durable store: one SQLite file shared by every process that touches it.

Who writes here at the same time: Terraform runs up to 10 provider calls in parallel (threads of
one provider process), several provider processes may run at once (one per working directory),
and ``xceprov sim fault ...`` injects faults from yet another process. Hence:

- WAL journal, ``busy_timeout``, and ``BEGIN IMMEDIATE`` for every write so that a writer takes
  the lock up front instead of failing half-way on an upgrade from a read lock;
- one row per instance (and one row per tag), short transactions, never a rewrite of the store;
- idempotency by ``client_token`` and address uniqueness are *also* enforced by partial unique
  indexes, so that even a logic slip cannot give two live instances one token or one address;
- fault controls (error rate, capacity per flavor and per flavor and zone, the account's quota,
  slow launches) live in the same file, so that every
  provider process sees them and they survive restarts;
- the cloud's own maximum lifetime: an instance tagged ``xce:max_lifetime`` (whole seconds) is
  terminated by the cloud itself, reason ``expired``, once ``launch_time`` plus that lifetime has
  passed. Every store operation first sweeps what is due (an indexed read finds nothing in the
  common case; only a due instance takes the write lock), so whoever looks at the cloud, a
  Terraform refresh or the host manager's poll every 0.5 s, sees it gone at its expiry, even if
  no process ran at that moment. The expiry follows the tag as it is now: a tag update moves it;
- the mutation journal: every create, terminate, tag update, stop and start is appended to the
  ``mutations`` table in the transaction that makes it, with the instance's ``xce:cluster`` and
  ``xce:provider`` tags, its client token and the epoch of the caller (the ``fence`` of the
  Terraform run, see ``provider.py``; "" for the cloud's own actions and the ``xceprov sim``
  tooling), so that a test can prove that two orchestrators never mutated one provider at once.

Costs: create, get, delete, tag update, the capacity checks and the expiry sweep are O(1)
(indexed) per call, plus O(k) for k instances expiring, and the quota check O(flavors) (a sum of
the per-flavor counts); listing is O(n) in the instances returned, reading a journal O(m) in the
rows returned (one append per mutation, one per create or delete request).

This module is the store's API (``CloudStore``); its parts live beside it, one concern each:
``db`` (connections, transactions, ``meta``), ``schema`` (tables and migrations), ``records``
and ``errors`` (what the API returns and raises), ``rows`` (instances read back), ``addresses``
(the network and allocation), ``faults`` (the fault controls), ``journal`` (the mutation journal),
``requestlog`` (the request journal: every create and delete request, refused ones included)
and ``images`` (images: snapshots of an instance's files, and the disks launched from them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from orchestrator.sim.cloud import addresses, billing, bootcopy, faults, images, journal, notices, requestlog, rows
from orchestrator.sim.cloud.db import Database, increment, meta
from orchestrator.sim.cloud.errors import (
    AddressSpaceExhausted,
    CloudApiError,
    CloudError,
    IdempotentParameterMismatch,
    ImageNotFound,
    InstanceLimitExceeded,
    InstanceNotFound,
    InsufficientCapacity,
    InvalidParameterValue,
)
from orchestrator.sim.cloud.faults import FaultSettings
from orchestrator.sim.cloud.notices import Notice
from orchestrator.sim.cloud.records import (
    ACTION_CREATE,
    ACTION_DELETE,
    ACTION_IMAGE_CREATE,
    ACTION_IMAGE_DELETE,
    ACTION_IMAGE_TAGS,
    ACTION_START,
    ACTION_STOP,
    ACTION_TAGS,
    REASON_EXPIRED,
    REASON_OUT_OF_BAND,
    REASON_SPOT,
    REASON_STOP,
    REASON_USER,
    RUNNING,
    STOPPED,
    TERMINATED,
    Image,
    Instance,
    Mutation,
    expiry_of,
    rfc3339,
)
from orchestrator.sim.cloud.schema import init_schema


class CloudStore:
    """The simulated cloud: instances, tags, addresses and fault controls in one SQLite file.

    ``api_faults`` decides whether the injected API faults (random error rate, lost create
    responses, slow launches) apply to calls made through this object: the Terraform provider passes ``True``; the
    ``xceprov sim`` tooling and the simulated hosts leave it ``False`` so that inspecting the
    cloud never fails at random. Capacity limits always apply to creates.

    ``clock`` gives the cloud's current Unix time (launch times, terminations, expiry); tests
    pass their own to move time without sleeping.

    One object may be shared by threads; each thread (and each forked process) gets its own
    SQLite connection.
    """

    def __init__(self, path: Path, *, api_faults: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.api_faults = api_faults
        self.clock = clock
        self._db = Database(self.path)
        self._local = threading.local()  # per thread: whether tooling suppresses the API faults
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db.write() as conn:
            init_schema(conn)

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        self._db.close()

    def _journal(self, conn: sqlite3.Connection, action: str, instance_id: str, epoch: str, reason: str = "") -> None:
        """Append one mutation of ``instance_id`` (inside the caller's write transaction)."""
        journal.append(conn, self.clock(), action, instance_id, epoch, reason)

    def _api_call(self, operation: str) -> FaultSettings | None:
        """Apply the injected API faults to one call (only when ``api_faults`` is on).

        Returns the fault settings read for this call (``None`` when faults are off).
        """
        return faults.api_call(self._db, operation) if self._faults_active() else None

    # ---------------------------------------------------------------- instances

    def create_instance(
        self,
        name: str,
        flavor: str,
        image: str,
        tags: Mapping[str, str],
        user_data: str,
        client_token: str,
        *,
        launch_time: str | None = None,
        epoch: str = "",
        boot_user_data: str | None = None,
        zone: str = "",
        subnet: str = "",
    ) -> Instance:
        """Launch an instance, or return the live one already made with this ``client_token``.

        ``zone``/``subnet``: where to place it ("" when the request names none); stored and
        reported with it, and ``zone`` is what a zone's capacity limit counts.
        ``boot_user_data``: what the host boots with when it differs from ``user_data`` (which the
        API reports), e.g. with a first-boot host's join token added (``bootcopy.py``).

        Like AWS ``ClientToken``: a retry with the same non-empty token returns the same
        instance; reusing it with another name, flavor, image, zone or subnet raises
        ``IdempotentParameterMismatch``. A terminated instance releases its token.
        Raises ``InstanceLimitExceeded`` when the account's quota of live instances is reached,
        ``InsufficientCapacity`` when the flavor's limit (in every zone, or in ``zone``) is
        reached and ``CloudApiError`` for an injected API fault. A launch is journalled under
        ``epoch`` (a returned existing instance is no mutation). Every call is a row of the
        request journal (``requestlog.py``), refused ones included. An ``image`` of the form
        ``img-...`` must name an available image (else ``InvalidParameterValue``): the
        instance's disk starts with its files (``images.py``); any other ``image`` is a name the
        cloud takes as it is.
        """
        place = _Placement(name, flavor, image, zone, subnet)
        try:
            inst, injected = self._launch(place, tags, user_data, client_token, launch_time, epoch, boot_user_data)
        except (CloudError, CloudApiError) as exc:
            # A refused request changes nothing but is a request all the same: journalled on its own.
            with contextlib.suppress(sqlite3.Error), self._db.write() as conn:
                self._request(conn, place, tags, client_token, requestlog.outcome_of(exc), epoch=epoch, exc=exc)
            raise
        if (
            injected is not None
            and injected.lost_response > 0
            and faults.draw(self._db, injected) < injected.lost_response
        ):
            raise CloudApiError(
                "RequestTimeout: simulated lost response to create (the instance may exist; "
                "repeat the request with the same client token)",
                delay=0.5,
            )
        return inst

    def _request(
        self,
        conn: sqlite3.Connection,
        place: _Placement,
        tags: Mapping[str, str],
        client_token: str,
        outcome: str,
        *,
        instance_id: str = "",
        epoch: str = "",
        exc: BaseException | None = None,
    ) -> None:
        """Journal one create request (inside the caller's write transaction)."""
        requestlog.append(
            conn,
            self.clock(),
            requestlog.CREATE,
            outcome,
            flavor=place.flavor,
            zone=place.zone,
            subnet=place.subnet,
            client_token=client_token,
            tags=tags,
            instance_id=instance_id,
            epoch=epoch,
            # The cloud's own one-line error (each starts with its code).
            detail="" if exc is None else str(exc),
        )

    def _launch(
        self,
        place: _Placement,
        tags: Mapping[str, str],
        user_data: str,
        client_token: str,
        launch_time: str | None,
        epoch: str,
        boot_user_data: str | None,
    ) -> tuple[Instance, FaultSettings | None]:
        """``create_instance`` up to its response: the instance and the fault settings read for the call."""
        injected = self._api_call("create")
        when = launch_time or rfc3339(self.clock())
        # Refused before anything is written, as a cloud refuses a malformed parameter.
        expires = expiry_of(when, tags)
        # Due instances go first: they give back their capacity, address and client token.
        self.expire_due()
        instance_id = "i-" + secrets.token_hex(6)
        try:
            with self._db.write() as conn:
                if client_token:
                    existing = conn.execute(
                        f"SELECT {rows.COLUMNS} FROM instances WHERE client_token = ? AND state != 'terminated'",
                        (client_token,),
                    ).fetchone()
                    if existing is not None:
                        inst = rows.row_to_instance(conn, existing)
                        if (inst.name, inst.flavor, inst.image, inst.zone, inst.subnet) != place:
                            raise IdempotentParameterMismatch(
                                f"IdempotentParameterMismatch: client token {client_token!r} was used for "
                                f"{inst.id} ({inst.name}, {inst.flavor}, {inst.image})"
                            )
                        self._request(
                            conn, place, tags, client_token, requestlog.EXISTING, instance_id=inst.id, epoch=epoch
                        )
                        return inst, injected
                faults.check_quota(conn)
                faults.check_capacity(conn, place.flavor, place.zone)
                if images.check_launchable(conn, place.image):
                    # Under the write lock: the image cannot be deleted meanwhile, and the host
                    # manager sees the instance only once its disk is whole.
                    images.seed(self.path.parent, place.image, instance_id)
                addr = addresses.allocate_address(conn)
                _count_live(conn, place.flavor, place.zone, +1)
                version = increment(conn, "version")
                conn.execute(
                    "INSERT INTO instances(id, name, flavor, image, user_data, client_token, addr, "
                    "launch_time, state, version, expires_at, zone, subnet) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                    (
                        instance_id,
                        place.name,
                        place.flavor,
                        place.image,
                        user_data,
                        client_token,
                        addr,
                        when,
                        version,
                        expires,
                        place.zone,
                        place.subnet,
                    ),
                )
                conn.executemany(
                    "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                    [(instance_id, k, v) for k, v in tags.items()],
                )
                if boot_user_data is not None:
                    bootcopy.keep(conn, instance_id, boot_user_data)
                self._journal(conn, ACTION_CREATE, instance_id, epoch)
                billing.open_segment(conn, instance_id, place.flavor, billing.RUNNING, billing.unix_of(when))
                self._request(conn, place, tags, client_token, requestlog.CREATED, instance_id=instance_id, epoch=epoch)
        except BaseException:
            # A launch refused or failed leaves no disk behind (the id is fresh: only a seed made one).
            shutil.rmtree(images.disk_dir(self.path.parent, instance_id), ignore_errors=True)
            raise
        inst = Instance(
            id=instance_id,
            name=place.name,
            flavor=place.flavor,
            image=place.image,
            tags=dict(tags),
            user_data=user_data,
            client_token=client_token,
            address=addresses.addr_text(addr),
            launch_time=when,
            state=RUNNING,
            expires_at="" if expires is None else rfc3339(expires),
            zone=place.zone,
            subnet=place.subnet,
            version=version,
        )
        return inst, injected

    def network(self) -> ipaddress.IPv4Network:
        """The network new instances get their addresses from."""
        with self._db.read() as conn:
            return addresses.network_of(meta(conn, "network"))

    def set_network(self, network: ipaddress.IPv4Network) -> None:
        """Hand out new addresses inside ``network`` (a /16 to a /29 of 10.213.0.0/16): the lab of
        the world this cloud belongs to. Live instances keep theirs; a changed network starts its
        allocation from its own bottom."""
        addresses.set_network(self._db, network)

    def get(self, instance_id: str) -> Instance | None:
        """The instance with this id (terminated ones included), or ``None`` if there is none."""
        self._api_call("read")
        self.expire_due()
        with self._db.read() as conn:
            row = conn.execute(f"SELECT {rows.COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return None if row is None else rows.row_to_instance(conn, row)

    def delete(self, instance_id: str, *, reason: str = REASON_USER, epoch: str = "") -> bool:
        """Terminate an instance (journalled under ``epoch``). Idempotent: ``False`` if it was
        already terminated or never existed."""
        try:
            self._api_call("delete")
        except CloudApiError as exc:
            with contextlib.suppress(sqlite3.Error), self._db.write() as conn:
                requestlog.append_delete(conn, self.clock(), instance_id, requestlog.ERROR, epoch, str(exc))
            raise
        return self._terminate(instance_id, reason, epoch, request=True)

    def _terminate(self, instance_id: str, reason: str, epoch: str = "", *, request: bool = False) -> bool:
        """End a live instance; ``request``: a delete request of the API, journalled as one."""
        # An instance already past its expiry was ended by the cloud, not by this call.
        self.expire_due()
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT addr, flavor FROM instances WHERE id = ? AND state != 'terminated'", (instance_id,)
            ).fetchone()
            if row is not None:
                self._mark_terminated(conn, instance_id, int(row[0]), str(row[1]), reason, rfc3339(self.clock()), epoch)
            if request:
                outcome = requestlog.ABSENT if row is None else requestlog.DELETED
                requestlog.append_delete(conn, self.clock(), instance_id, outcome, epoch)
            return row is not None

    def expire_due(self) -> list[Instance]:
        """Terminate every live instance past its expiry, reason ``expired``; returns them.

        The cloud's own action (no injected API fault applies), run first by every instance
        operation of the store, so nobody ever sees an instance alive past its expiry.
        ``terminated_at`` is the expiry itself, whenever the sweep ran. Nothing due (the usual
        case) costs one indexed read and takes no write lock.
        """
        now = self.clock()
        reclaimed = self.reclaim_noticed(now)
        with self._db.read() as conn:
            due = conn.execute(rows.DUE + " LIMIT 1", (now,)).fetchone()
        if due is None:
            return reclaimed
        with self._db.write() as conn:
            start = int(meta(conn, "version") or 0)
            # Read again under the write lock: another process may have swept them meanwhile.
            for rid, addr, flavor, expires in conn.execute(rows.DUE, (now,)).fetchall():
                self._mark_terminated(conn, str(rid), int(addr), str(flavor), REASON_EXPIRED, rfc3339(float(expires)))
            return reclaimed + rows.select(conn, "i.version > ?", [start], order="i.version")

    def reclaim_noticed(self, now: float | None = None) -> list[Instance]:
        """Terminate every instance whose interruption notice is due, reason ``spot-reclaim``,
        ``terminated_at`` its ``reclaim_at`` (``notices.py``); returns them. Nothing due costs one
        indexed read and no write lock."""
        now = self.clock() if now is None else now
        with self._db.read() as conn:
            if not notices.due(conn, now):
                return []
        with self._db.write() as conn:
            start = int(meta(conn, "version") or 0)
            for instance_id, reclaim_at in notices.due(conn, now):  # again, under the write lock
                row = conn.execute(
                    "SELECT addr, flavor FROM instances WHERE id = ? AND state != 'terminated'", (instance_id,)
                ).fetchone()
                notices.settle(conn, instance_id, reclaim_at)  # first: the reclaim's time, not now
                if row is not None:
                    self._mark_terminated(conn, instance_id, int(row[0]), str(row[1]), REASON_SPOT, rfc3339(reclaim_at))
            return rows.select(conn, "i.version > ?", [start], order="i.version")

    def spot_notice(
        self, *, instance_id: str | None = None, flavor: str | None = None, lead: float = notices.DEFAULT_LEAD
    ) -> list[Notice]:
        """Give an interruption notice to running ``instance_id`` (or every running instance of
        ``flavor``): reclaimed ``lead`` seconds from now. Returns the notices (an instance noticed
        before keeps its first one)."""
        if (instance_id is None) == (flavor is None):
            raise ValueError("a spot notice needs exactly one of an instance id or a flavor")
        self.expire_due()
        column, value = ("id", instance_id) if instance_id is not None else ("flavor", flavor)
        with self._db.write() as conn:
            found = conn.execute(
                f"SELECT id FROM instances WHERE {column} = ? AND state = 'running' ORDER BY seq", (value,)
            ).fetchall()
            return notices.issue(conn, [str(r[0]) for r in found], self.clock(), lead)

    def list_notices(self, instance_ids: list[str] | None = None) -> list[Notice]:
        """Interruption notices (of ``instance_ids``; every one when None), oldest first; what is
        due is reclaimed first. An API read: the injected error rate applies (through the provider)."""
        self._api_call("read")
        self.expire_due()
        with self._db.read() as conn:
            return notices.read(conn, instance_ids)

    def _mark_terminated(
        self,
        conn: sqlite3.Connection,
        instance_id: str,
        addr: int,
        flavor: str,
        reason: str,
        when: str,
        epoch: str = "",
    ) -> None:
        """Terminate one live instance inside the caller's write transaction; frees address and
        capacity; journalled under ``epoch`` ("" for the cloud's own terminations)."""
        version = increment(conn, "version")
        conn.execute(
            "UPDATE instances SET state = 'terminated', state_reason = ?, terminated_at = ?, version = ? WHERE id = ?",
            (reason, when, version, instance_id),
        )
        conn.execute("INSERT OR IGNORE INTO free_addresses(addr) VALUES (?)", (addr,))
        zone = conn.execute("SELECT zone FROM instances WHERE id = ?", (instance_id,)).fetchone()
        _count_live(conn, flavor, str(zone[0]), -1)
        bootcopy.forget(conn, instance_id)
        notices.settle(conn, instance_id, self.clock())  # a noticed instance ended before its reclaim
        billing.close(conn, instance_id, billing.unix_of(when))
        self._journal(conn, ACTION_DELETE, instance_id, epoch, reason)

    def update_tags(self, instance_id: str, tags: Mapping[str, str], *, epoch: str = "") -> Instance:
        """Replace the tags of a live instance (the whole map, like Terraform's ``tags``);
        journalled under ``epoch``.

        A changed ``xce:max_lifetime`` moves the expiry (from the launch time, not from now); one
        already past ends the instance at the next operation.
        """
        self.expire_due()
        with self._db.write() as conn:
            row = conn.execute("SELECT state, launch_time FROM instances WHERE id = ?", (instance_id,)).fetchone()
            if row is None or row[0] == TERMINATED:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
            expires = expiry_of(str(row[1]), tags)
            version = increment(conn, "version")
            conn.execute(
                "UPDATE instances SET version = ?, expires_at = ? WHERE id = ?", (version, expires, instance_id)
            )
            conn.execute("DELETE FROM tags WHERE instance_id = ?", (instance_id,))
            conn.executemany(
                "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                [(instance_id, k, v) for k, v in tags.items()],
            )
            self._journal(conn, ACTION_TAGS, instance_id, epoch)
            full = conn.execute(f"SELECT {rows.COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return rows.row_to_instance(conn, full)

    def stop(self, instance_id: str, *, epoch: str = "") -> Instance:
        """Stop a running instance (journalled under ``epoch``; a stopped one is returned as it is).

        It keeps its id, address, tags, capacity and client token; its simulated host is torn
        down with its disk kept, and ``start`` boots it again from that disk.
        """
        return self._set_run_state(instance_id, RUNNING, STOPPED, REASON_STOP, epoch)

    def start(self, instance_id: str, *, epoch: str = "", boot_user_data: str | None = None) -> Instance:
        """Start a stopped instance (journalled under ``epoch``; a running one is returned as it is).

        ``boot_user_data``: the copy the host boots with from now on (``bootcopy.py``), kept in the
        same transaction as the start, so the host manager never boots it with the old one: a
        warm-pool instance of a first-boot template gets the fresh join token its start op minted.
        """
        return self._set_run_state(instance_id, STOPPED, RUNNING, "", epoch, boot_user_data)

    def _set_run_state(
        self, instance_id: str, before: str, after: str, reason: str, epoch: str, boot_user_data: str | None = None
    ) -> Instance:
        # An API call like delete: the injected error rate applies (through the provider).
        self._api_call("stop" if after == STOPPED else "start")
        self.expire_due()
        with self._db.write() as conn:
            row = conn.execute("SELECT state FROM instances WHERE id = ?", (instance_id,)).fetchone()
            if row is None or row[0] == TERMINATED:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
            if row[0] == before:
                if boot_user_data is not None:
                    bootcopy.keep(conn, instance_id, boot_user_data)
                version = increment(conn, "version")
                conn.execute(
                    "UPDATE instances SET state = ?, state_reason = ?, version = ? WHERE id = ?",
                    (after, reason, version, instance_id),
                )
                self._journal(conn, ACTION_STOP if after == STOPPED else ACTION_START, instance_id, epoch)
                billing.transition(conn, instance_id, after, self.clock())
            full = conn.execute(f"SELECT {rows.COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return rows.row_to_instance(conn, full)

    def list_instances(
        self, tag_filter: Mapping[str, str] | None = None, include_terminated: bool = False
    ) -> list[Instance]:
        """Instances whose tags contain every pair of ``tag_filter``, oldest first."""
        self._api_call("read")
        self.expire_due()
        where, params = rows.where(tag_filter, include_terminated)
        with self._db.read() as conn:
            return rows.select(conn, where, params)

    def boot_copies(self) -> dict[str, str]:
        """Instance id -> the user data the host boots with, for live instances whose boot copy
        differs from their reported ``user_data`` (``bootcopy.py``). The host manager's read: no
        API call returns it."""
        with self._db.read() as conn:
            return bootcopy.copies(conn)

    def mutations(self, since: int = 0, provider: str | None = None) -> list[Mutation]:
        """The mutation journal after sequence ``since``, in commit order (of one ``provider``
        when given). Read-only: no expiry sweep runs first, so reading never adds an entry."""
        with self._db.read() as conn:
            return journal.read(conn, since, provider)

    def requests(self, since: float = 0.0) -> list[requestlog.Request]:
        """The request journal from Unix time ``since`` on, oldest first (``requestlog.py``):
        every create and delete request received, refused ones included. Read-only."""
        with self._db.read() as conn:
            return requestlog.read(conn, since)

    def changes_since(self, version: int) -> tuple[int, list[Instance]]:
        """Instances changed after store version ``version`` (terminated included) and the current version.

        A watcher (the simulated hosts) polls this with the version it got last time and so
        sees every launch, tag change and termination exactly once, at O(changes) cost.
        """
        self.expire_due()
        with self._db.read() as conn:
            current = int(meta(conn, "version") or 0)
            changed = rows.select(conn, "i.version > ?", [version], order="i.version")
            return current, changed

    # ---------------------------------------------------------------- images

    def create_image(self, instance_id: str, name: str, tags: Mapping[str, str], *, epoch: str = "") -> Image:
        """Make an image of a live (running or stopped) instance's files (``images.py``), with
        ``tags``; journalled under ``epoch``. Raises ``InstanceNotFound`` for a terminated or
        unknown instance and ``InvalidParameterValue`` for an empty name."""
        self._api_call("create-image")
        if not name:
            raise InvalidParameterValue("InvalidParameterValue: an image needs a name")
        self.expire_due()
        source = self._live_image_of(instance_id)
        image_id = images.new_id()
        root = self.path.parent
        # The files first: a row always names a whole snapshot.
        images.snapshot(root, instance_id, image_id)
        try:
            with self._db.write() as conn:
                if self._live_image_of(instance_id, conn) != source:
                    raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
                conn.execute(
                    "INSERT INTO images(id, name, instance_id, source_image, created_at, state) "
                    "VALUES (?, ?, ?, ?, ?, 'available')",
                    (image_id, name, instance_id, source, rfc3339(self.clock())),
                )
                conn.executemany(
                    "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                    [(image_id, k, v) for k, v in tags.items()],
                )
                self._journal(conn, ACTION_IMAGE_CREATE, image_id, epoch)
                return images.select(conn, "m.id = ?", [image_id])[0]
        except BaseException:
            images.remove_files(root, image_id)
            raise

    def _live_image_of(self, instance_id: str, conn: sqlite3.Connection | None = None) -> str:
        """The ``image`` of a live instance; ``InstanceNotFound`` when it is not live."""
        if conn is None:
            with self._db.read() as reader:
                return self._live_image_of(instance_id, reader)
        row = conn.execute(
            "SELECT image FROM instances WHERE id = ? AND state != 'terminated'", (instance_id,)
        ).fetchone()
        if row is None:
            raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
        return str(row[0])

    def get_image(self, image_id: str) -> Image | None:
        """The image with this id (deleted ones included), or ``None``."""
        self._api_call("read")
        with self._db.read() as conn:
            found = images.select(conn, "m.id = ?", [image_id])
            return found[0] if found else None

    def list_images(self, tag_filter: Mapping[str, str] | None = None, include_deleted: bool = False) -> list[Image]:
        """Images whose tags contain every pair of ``tag_filter``, oldest first."""
        self._api_call("read")
        where, params = images.where(tag_filter, include_deleted)
        with self._db.read() as conn:
            return images.select(conn, where, params)

    def update_image_tags(self, image_id: str, tags: Mapping[str, str], *, epoch: str = "") -> Image:
        """Replace the tags of an available image (the whole map); journalled under ``epoch``."""
        with self._db.write() as conn:
            found = images.select(conn, "m.id = ? AND m.state = 'available'", [image_id])
            if not found:
                raise ImageNotFound(f"InvalidAMIID.NotFound: no available image {image_id}")
            conn.execute("DELETE FROM tags WHERE instance_id = ?", (image_id,))
            conn.executemany(
                "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                [(image_id, k, v) for k, v in tags.items()],
            )
            self._journal(conn, ACTION_IMAGE_TAGS, image_id, epoch)
            return images.select(conn, "m.id = ?", [image_id])[0]

    def delete_image(self, image_id: str, *, epoch: str = "") -> bool:
        """Delete an image and its files (journalled under ``epoch``). Idempotent: ``False`` if
        it was already deleted or never existed. Instances started from it keep their files."""
        self._api_call("delete-image")
        with self._db.write() as conn:
            done = conn.execute(
                "UPDATE images SET state = 'deleted', deleted_at = ? WHERE id = ? AND state = 'available'",
                (rfc3339(self.clock()), image_id),
            ).rowcount
            if done:
                self._journal(conn, ACTION_IMAGE_DELETE, image_id, epoch)
        # After the row: a launch that saw the image available has already copied its files.
        images.remove_files(self.path.parent, image_id)
        return bool(done)

    # ---------------------------------------------------------------- fault controls

    def faults(self) -> FaultSettings:
        """The fault controls currently in force."""
        return faults.read_faults(self._db)

    def set_error_rate(self, rate: float, seed: int | None = None) -> None:
        """Make each create/read/delete fail with a retryable API error with probability ``rate``
        (deterministic with a ``seed``; see ``faults.set_error_rate``)."""
        faults.set_error_rate(self._db, rate, seed)

    def set_capacity(self, flavor: str, limit: int | None, zone: str = "") -> None:
        """Allow at most ``limit`` live instances of ``flavor`` (in ``zone``; "" every zone
        together); ``None`` removes that limit."""
        faults.set_capacity(self._db, flavor, limit, zone)

    def set_quota(self, limit: int | None) -> None:
        """Allow the account at most ``limit`` live instances, every flavor; ``None`` removes it."""
        faults.set_quota(self._db, limit)

    def set_lost_response(self, rate: float) -> None:
        """Make each API create, with probability ``rate``, succeed but raise a retryable error
        (see ``faults.set_lost_response``)."""
        faults.set_lost_response(self._db, rate)

    def set_slow_launch(self, seconds: float) -> None:
        """Add ``seconds`` to every create and start made through the API (0 turns it off)."""
        faults.set_slow_launch(self._db, seconds)

    def clear_faults(self) -> None:
        """Remove every fault control (error rate, seed, slow launches, capacity limits, quota)."""
        faults.clear_faults(self._db)

    # ---------------------------------------------------------------- tooling (no API faults)

    def delete_out_of_band(self, instance_id: str) -> Instance:
        """Terminate an instance behind Terraform's back (reason ``out-of-band-delete``)."""
        if not self._terminate(instance_id, REASON_OUT_OF_BAND):
            inst = self.get_unfaulted(instance_id)
            if inst is None:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no instance {instance_id}")
        inst = self.get_unfaulted(instance_id)
        assert inst is not None
        return inst

    def create_out_of_band(
        self,
        name: str,
        flavor: str,
        image: str,
        tags: Mapping[str, str],
        *,
        user_data: str = "",
        launch_time: str | None = None,
    ) -> Instance:
        """Launch an instance Terraform never made (no client token); capacity limits still apply."""
        with self._no_api_faults():
            return self.create_instance(name, flavor, image, tags, user_data, "", launch_time=launch_time)

    def spot_reclaim(self, *, instance_id: str | None = None, flavor: str | None = None) -> list[Instance]:
        """Terminate running instances of ``flavor`` (or the one ``instance_id``), reason ``spot-reclaim``.

        Returns the instances reclaimed (an empty list when none was running).
        """
        if (instance_id is None) == (flavor is None):
            raise ValueError("spot reclaim needs exactly one of an instance id or a flavor")
        self.expire_due()
        with self._db.write() as conn:
            if instance_id is not None:
                rows = conn.execute(
                    "SELECT id, addr, flavor FROM instances WHERE id = ? AND state = 'running'",
                    (instance_id,),
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT id, addr, flavor FROM instances WHERE flavor = ? AND state = 'running'", (flavor,)
                ).fetchall()
            now = rfc3339(self.clock())
            for rid, addr, rflavor in rows:
                self._mark_terminated(conn, str(rid), int(addr), str(rflavor), REASON_SPOT, now)
        out = [self.get_unfaulted(rid) for rid, _, _ in rows]
        return [i for i in out if i is not None]

    def get_unfaulted(self, instance_id: str) -> Instance | None:
        """``get`` without injected API faults (for tooling)."""
        with self._no_api_faults():
            return self.get(instance_id)

    @contextlib.contextmanager
    def _no_api_faults(self) -> Iterator[None]:
        # Per-thread override so that tooling calls never draw from the error rate.
        previous = getattr(self._local, "suppress", False)
        self._local.suppress = True
        try:
            yield
        finally:
            self._local.suppress = previous

    def _faults_active(self) -> bool:
        return self.api_faults and not getattr(self._local, "suppress", False)


class _Placement(NamedTuple):
    """What a create asks for that a retry with the same client token must repeat exactly."""

    name: str
    flavor: str
    image: str
    zone: str
    subnet: str


def _count_live(conn: sqlite3.Connection, flavor: str, zone: str, delta: int) -> None:
    """Move the live counts of ``flavor`` (every zone, and ``zone``) by ``delta`` (O(1) each)."""
    conn.execute(
        "INSERT INTO flavor_live(flavor, live) VALUES (?, ?) ON CONFLICT(flavor) DO UPDATE SET live = live + ?",
        (flavor, max(delta, 0), delta),
    )
    conn.execute(
        "INSERT INTO zone_live(flavor, zone, live) VALUES (?, ?, ?) "
        "ON CONFLICT(flavor, zone) DO UPDATE SET live = live + ?",
        (flavor, zone, max(delta, 0), delta),
    )


# The values and errors of the store's API, importable from here as before the split.
__all__ = [
    "REASON_EXPIRED",
    "RUNNING",
    "STOPPED",
    "TERMINATED",
    "AddressSpaceExhausted",
    "CloudApiError",
    "CloudError",
    "CloudStore",
    "FaultSettings",
    "IdempotentParameterMismatch",
    "Image",
    "ImageNotFound",
    "Instance",
    "InstanceLimitExceeded",
    "InstanceNotFound",
    "InsufficientCapacity",
    "InvalidParameterValue",
    "Mutation",
]
