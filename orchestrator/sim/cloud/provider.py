"""The ``xcesim`` Terraform provider: the simulated cloud behind the real Terraform plugin protocol.

Run as ``python -m orchestrator.sim.cloud.provider``; Terraform starts it from the local
mirror (``orchestrator.clients.terraform.mirror.XCESIM``) and talks plugin protocol v6 to it
through the ``tf`` framework. The contract (``docs/architecture.md``):

- provider configuration: ``store`` (path of the SQLite store, relative to Terraform's working
  directory if not absolute); optional ``max_retries`` (how many times the provider itself
  retries an injected retryable API error before reporting it, default 0: the error reaches
  Terraform's diagnostics and the orchestrator decides); optional ``fence``: the epoch tag
  (``<term>.<seq>``, or ``none`` standalone) of the lease the run was planned under, fed from the
  root variable ``fence`` that the orchestrator sets at plan time. Every create, tag update and
  delete of the run is recorded in the store's mutation journal with it ("" when unset: a run
  outside the orchestrator's executor), which is how the tests prove that two orchestrators
  never mutated one provider under interleaved epochs. Optional ``join_tokens`` (sensitive, fed
  from the root's ephemeral variable of that name, so neither a saved plan nor the state holds
  it): instance key (the instance's ``client_token``) -> that host's join token. A create whose
  key has one adds a ``/etc/xce/join-token`` (0600) ``write_files`` entry to the cloud's copy of
  the user data the host boots with (``bootcopy.py``), never to the ``user_data`` attribute the
  state keeps (docs/bootstrap.md, "First boot"); so does a ``power_state`` change to ``running``
  (a warm-pool instance started in place: its boot copy gets the token its start op minted).
- resource ``xcesim_instance``: ``name``, ``flavor``, ``image``, ``user_data``,
  ``client_token`` and the optional ``zone`` and ``subnet`` (where the cloud places it: a
  capacity limit can be per flavor and zone, ``xceprov sim fault capacity --zone``) force
  replacement; ``tags`` update in place, and so does ``power_state``
  (``running`` or ``stopped``: an apply starts or stops the instance, which keeps its id, address,
  tags and disk; null, the default: the instance is left as it is, and a refresh does not report
  its power as drift); computed ``id``, ``address``, ``launch_time``, ``state``. A read of a
  terminated or unknown instance reports it gone, so a refresh-only plan shows drift ``delete``.
  ``terraform import xcesim_instance.x i-...`` adopts an existing instance.
- resource ``xcesim_image``: an image of an instance's files (``images.py``): ``instance_id`` and
  ``name`` force replacement, ``tags`` update in place; computed ``id`` (``img-...``),
  ``source_image`` (the instance's own image), ``created_at``, ``state``. Destroy deletes it and
  its files; a read of a deleted or unknown image reports it gone. An ``xcesim_instance`` whose
  ``image`` is an image's id starts with its files.
- data source ``xcesim_images``: input ``tags`` (every pair must match); computed ``images``, a
  list of objects with every attribute of the resource, oldest first, available images only.
- data source ``xcesim_instances``: input ``tags`` (every pair must match) and optional
  ``recently_terminated`` (bool); computed ``instances``, a list of objects with every
  attribute of the resource plus ``state_reason``, ``terminated_at`` (RFC 3339, null while
  not terminated) and ``interruption_at``/``reclaim_at`` (RFC 3339,
  null without an interruption notice), oldest first: live instances only, or also
  those terminated in the last hour when ``recently_terminated`` is true.
- data source ``xcesim_flavors``: no input; computed ``flavors``, the cloud's flavor catalogue
  (``catalogue.py``) by name, a list of objects ``{name, cpus, memory_gb, gpus, cost_per_hour
  (null: no price), zones}`` (what ``terraform/catalogue/xcesim`` outputs).

Values travel as msgpack from Terraform to the store and back untouched, so a name or tag
holding ``"``, ``${``, ``%{``, a newline or HCL is stored byte for byte.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

import tf.runner
from tf import schema, types
from tf.iface import (
    Config,
    CreateContext,
    DataSource,
    DeleteContext,
    ImportContext,
    PlanContext,
    Provider,
    ReadContext,
    ReadDataContext,
    Resource,
    State,
    UpdateContext,
    UpgradeContext,
)
from tf.runner import run_provider
from tf.utils import Diagnostics

from orchestrator.sim.cloud import catalogue
from orchestrator.sim.cloud.bootcopy import with_join_token
from orchestrator.sim.cloud.db import Database
from orchestrator.sim.cloud.errors import CloudApiError, CloudError
from orchestrator.sim.cloud.notices import Notice
from orchestrator.sim.cloud.records import AVAILABLE, RUNNING, STOPPED, TERMINATED, Image, Instance
from orchestrator.sim.cloud.store import CloudStore

FULL_NAME: Final = "registry.terraform.io/xce/xcesim"
PREFIX: Final = "xcesim_"

log = logging.getLogger("xcesim")

# Attribute names of an instance, in the order of the data source's object type.
_INSTANCE_ATTRS: Final = (
    "id",
    "name",
    "flavor",
    "zone",
    "subnet",
    "image",
    "tags",
    "user_data",
    "client_token",
    "address",
    "launch_time",
    "state",
)

# What ``power_state`` may ask for: an apply starts or stops the instance in place.
POWER_STATES: Final = (RUNNING, STOPPED)

# The data source's objects also say why an instance left ``running`` (``spot-reclaim``...).
_LISTED_ATTRS: Final = (*_INSTANCE_ATTRS, "state_reason")
# A listed instance's interruption notice (RFC 3339; null when it has none, notices.py).
_NOTICE_ATTRS: Final = ("interruption_at", "reclaim_at")
# When a listed instance was terminated (RFC 3339; null while it is not): where the cloud's
# bill ends it, so a reader records a loss at the cloud's time, not its own.
_ENDED_ATTRS: Final = ("terminated_at",)

# A fence is empty (no lease: a run outside the executor), ``none`` (standalone) or ``<term>.<seq>``.
_FENCE = re.compile(r"|none|[0-9]{1,20}\.[0-9]{1,20}")

# How long a terminated instance stays in a listing that asks for recent terminations, like
# EC2, which keeps terminated instances visible for about an hour.
RECENTLY_TERMINATED_SECONDS: Final = 3600


class ObjectType(types.TfType):  # type: ignore[misc]
    """A Terraform object type (``tf`` 1.2 has none): a fixed set of typed attributes.

    Values are plain dicts; every attribute must be present (null allowed), as Terraform
    requires of an object value.
    """

    def __init__(self, attributes: dict[str, Any]) -> None:
        self.attributes = attributes

    def encode(self, value: Any) -> Any:
        if value is None or value is types.Unknown:
            return value
        return {k: t.encode(value.get(k)) for k, t in self.attributes.items()}

    def decode(self, value: Any) -> Any:
        if value is None or value is types.Unknown:
            return value
        return {k: t.decode(value.get(k)) for k, t in self.attributes.items()}

    def tf_type(self) -> bytes:
        inner = ",".join(f'"{k}":{t.tf_type().decode()}' for k, t in self.attributes.items())
        return f'["object",{{{inner}}}]'.encode()


# Attribute names of an image, in the order of the ``xcesim_images`` data source's object type.
_IMAGE_ATTRS: Final = ("id", "name", "instance_id", "source_image", "tags", "created_at", "state")


def _image_object_type() -> ObjectType:
    attrs: dict[str, Any] = {name: types.String() for name in _IMAGE_ATTRS}
    attrs["tags"] = types.Map(types.String())
    return ObjectType(attrs)


def _instance_object_type() -> ObjectType:
    attrs: dict[str, Any] = {name: types.String() for name in (*_LISTED_ATTRS, *_NOTICE_ATTRS, *_ENDED_ATTRS)}
    attrs["tags"] = types.Map(types.String())
    return ObjectType(attrs)


class XceSimProvider(Provider):  # type: ignore[misc]
    """The provider object: holds the store once Terraform has configured it."""

    def __init__(self) -> None:
        self._store: CloudStore | None = None
        self.max_retries = 0
        # The epoch tag of the run (configuration ``fence``), recorded with each mutation.
        self.fence = ""
        # Instance key -> join token of a first-boot host (configuration ``join_tokens``).
        self.join_tokens: dict[str, str] = {}

    def full_name(self) -> str:
        """Provider source address."""
        return FULL_NAME

    def get_model_prefix(self) -> str:
        """Prefix of every resource and data source type name."""
        return PREFIX

    def get_provider_schema(self, diags: Diagnostics) -> schema.Schema:
        """Provider configuration schema."""
        return schema.Schema(
            attributes=[
                schema.Attribute(
                    "store",
                    types.String(),
                    required=True,
                    description="Path of the simulated cloud's SQLite store.",
                ),
                schema.Attribute(
                    "max_retries",
                    types.Number(),
                    optional=True,
                    description="Retries of a retryable API error inside the provider (default 0).",
                ),
                schema.Attribute(
                    "fence",
                    types.String(),
                    optional=True,
                    description="Epoch tag of the lease the run was planned under, journalled with each mutation.",
                ),
                schema.Attribute(
                    "join_tokens",
                    types.Map(types.String()),
                    optional=True,
                    sensitive=True,
                    description="Instance key -> join token of a first-boot host, written to the host's "
                    "boot copy of its user data (/etc/xce/join-token, 0600) and never to its user_data.",
                ),
            ]
        )

    def validate_config(self, diags: Diagnostics, config: Config) -> None:
        """Reject an empty store path, a negative retry count or a malformed fence."""
        store = config.get("store")
        if isinstance(store, str) and not store.strip():
            diags.add_error("xcesim: store must name a file", path=["store"])
        retries = config.get("max_retries")
        if isinstance(retries, int | float) and retries < 0:
            diags.add_error("xcesim: max_retries must be 0 or more", path=["max_retries"])
        fence = config.get("fence")
        if isinstance(fence, str) and not _FENCE.fullmatch(fence):
            diags.add_error(f"xcesim: fence {fence!r} is not an epoch tag <term>.<seq>, none or empty", path=["fence"])

    def configure_provider(self, diags: Diagnostics, config: Config) -> None:
        """Open the store named by the configuration."""
        store = config.get("store")
        if not isinstance(store, str) or not store:
            diags.add_error("xcesim: the provider needs a store path", path=["store"])
            return
        retries = config.get("max_retries")
        self.max_retries = int(retries) if isinstance(retries, int | float) else 0
        fence = config.get("fence")
        # Configured again by each walk of the command: every walk of one run has the same fence.
        self.fence = fence if isinstance(fence, str) and _FENCE.fullmatch(fence) else ""
        tokens = config.get("join_tokens")
        # Ephemeral at the root: the same map at plan and at apply; a create or a start reads it.
        self.join_tokens = (
            {str(k): str(v) for k, v in tokens.items() if isinstance(v, str) and v} if isinstance(tokens, dict) else {}
        )
        if self._store is not None:
            # Configured again in the same process: an attached provider serves every walk of
            # one command (and every alias of it), each configuring it. One store per process.
            if self._store.path != Path(store):
                diags.add_error(
                    f"xcesim: this provider process serves store {self._store.path}, not {store}; "
                    "configurations with different stores need terraform.attach_providers: false",
                    path=["store"],
                )
            return
        try:
            self._store = CloudStore(Path(store), api_faults=True)
        except Exception as exc:  # an unusable path is a configuration problem, shown once
            diags.add_error(f"xcesim: cannot open store {store}: {exc}", path=["store"])

    @property
    def store(self) -> CloudStore:
        """The configured store."""
        if self._store is None:
            raise CloudError("xcesim: provider used before it was configured")
        return self._store

    def get_resources(self) -> list[type[Resource]]:
        """Resource types."""
        return [InstanceResource, ImageResource]

    def get_data_sources(self) -> list[type[DataSource]]:
        """Data source types."""
        return [InstancesDataSource, ImagesDataSource, FlavorsDataSource]

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the store, retrying injected retryable errors up to ``max_retries`` times.

        Whatever else goes wrong becomes a cloud error, so that Terraform always gets a
        diagnostic with a readable summary rather than a failed plugin call.
        """
        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except CloudApiError as exc:
                if attempt >= self.max_retries:
                    raise
                attempt += 1
                log.warning("xcesim: %s: %s (retry %d of %d)", what, exc, attempt, self.max_retries)
                time.sleep(min(exc.delay * attempt, 5.0))
            except sqlite3.OperationalError as exc:
                # The store stayed locked past its busy timeout: the API is overloaded, try later.
                raise CloudApiError(f"RequestLimitExceeded: simulated cloud store busy ({exc})") from exc
            except CloudError:
                raise
            except Exception as exc:
                log.exception("xcesim: %s failed", what)
                raise CloudError(f"InternalFailure: {type(exc).__name__}: {exc}") from exc


def _error(diags: Diagnostics, exc: Exception, what: str) -> None:
    # The summary is the cloud's own one-line error (``InsufficientCapacity: flavor ... (limit 5)``)
    # so that it reaches Terraform's diagnostic and the orchestrator's report unchanged.
    detail = f"while {what}"
    if isinstance(exc, CloudApiError):
        detail += " (retryable: the request may succeed if repeated with the same client_token)"
    diags.add_error(str(exc), detail)


def _state(inst: Instance, like: State | None = None) -> State:
    """The Terraform state of an instance; empty optional values stay null if they were null."""
    state: State = {
        "id": inst.id,
        "name": inst.name,
        "flavor": inst.flavor,
        "zone": inst.zone,
        "subnet": inst.subnet,
        "image": inst.image,
        "tags": dict(inst.tags),
        "user_data": inst.user_data,
        "client_token": inst.client_token,
        "address": inst.address,
        "launch_time": inst.launch_time,
        "state": inst.state,
        # Null unless the configuration asks for a power state: then what the instance is now
        # (a refresh shows an instance started or stopped behind Terraform's back as a diff).
        "power_state": None,
    }
    if like is not None:
        # Optional inputs left out of the configuration are null in Terraform and empty in the
        # store; reporting them back as empty would show a perpetual diff.
        for key, empty in (("tags", {}), ("user_data", ""), ("client_token", ""), ("zone", ""), ("subnet", "")):
            if like.get(key) is None and state[key] == empty:
                state[key] = None
        if like.get("power_state") is not None:
            state["power_state"] = inst.state
    return state


class InstanceResource(Resource):  # type: ignore[misc]
    """``xcesim_instance``: one simulated instance."""

    def __init__(self, provider: XceSimProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        """Type name without the provider prefix."""
        return "instance"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        """Resource schema."""
        s, m = types.String(), types.Map(types.String())
        return schema.Schema(
            # 2: ``power_state``; 3: ``zone`` and ``subnet`` (an older state has them null: see ``upgrade``).
            version=3,
            attributes=[
                schema.Attribute("name", s, required=True, requires_replace=True),
                schema.Attribute("flavor", s, required=True, requires_replace=True),
                schema.Attribute(
                    "zone", s, optional=True, requires_replace=True, description="Zone to place it in (null: any)."
                ),
                schema.Attribute(
                    "subnet", s, optional=True, requires_replace=True, description="Subnet to place it in (null: any)."
                ),
                schema.Attribute("image", s, required=True, requires_replace=True),
                schema.Attribute("tags", m, optional=True),
                schema.Attribute("user_data", s, optional=True, requires_replace=True),
                schema.Attribute("client_token", s, optional=True, requires_replace=True),
                schema.Attribute(
                    "power_state",
                    s,
                    optional=True,
                    description="running or stopped: an apply starts or stops the instance in place; "
                    "null leaves it as it is.",
                ),
                schema.Attribute("id", s, computed=True, description="Instance id (i-...)."),
                schema.Attribute("address", s, computed=True, description="Address in 10.213.0.0/16."),
                schema.Attribute("launch_time", s, computed=True, description="RFC 3339 launch time."),
                schema.Attribute("state", s, computed=True, description="running, stopped or terminated."),
            ],
        )

    def validate(self, diags: Diagnostics, type_name: str, config: Config) -> None:
        """Refuse a ``power_state`` other than ``running`` or ``stopped``."""
        power = config.get("power_state")
        if isinstance(power, str) and power not in POWER_STATES:
            diags.add_error(
                f"xcesim: power_state {power!r} is not one of {', '.join(POWER_STATES)}", path=["power_state"]
            )

    def plan(self, ctx: PlanContext, current: State | None, planned: State) -> State:
        """A change of ``power_state`` changes ``state`` in place: plan the state it will reach."""
        power = planned.get("power_state")
        if current is not None and "power_state" in ctx.changed_fields and power in POWER_STATES:
            planned["state"] = power
        return planned

    def upgrade(self, ctx: UpgradeContext, version: int, old: State) -> State:
        """A state written before ``power_state`` existed: null (the instance is left as it is);
        before ``zone`` and ``subnet``: null (it was placed where the cloud chose)."""
        return {**old, **{key: old.get(key) for key in ("power_state", "zone", "subnet")}}

    def create(self, ctx: CreateContext, planned: State) -> State | None:
        """Launch the instance (idempotent by ``client_token``); stop it if ``power_state`` says so."""
        p = self.provider
        user_data = planned.get("user_data") or ""
        token = p.join_tokens.get(planned.get("client_token") or "")
        try:
            # The token goes into the copy the host boots with, never into what the state keeps.
            boot = with_join_token(user_data, token) if token else None
        except ValueError as exc:
            ctx.diagnostics.add_error(f"InvalidParameterValue: {exc}", f"creating instance {planned.get('name')!r}")
            return None
        try:
            inst = p.call(
                "create",
                p.store.create_instance,
                planned["name"],
                planned["flavor"],
                planned["image"],
                planned.get("tags") or {},
                user_data,
                planned.get("client_token") or "",
                epoch=p.fence,
                boot_user_data=boot,
                zone=planned.get("zone") or "",
                subnet=planned.get("subnet") or "",
            )
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"creating instance {planned.get('name')!r}")
            return None
        inst = self._power(ctx.diagnostics, inst, planned.get("power_state"))
        return _state(inst, planned)

    def _power(self, diags: Diagnostics, inst: Instance, want: object) -> Instance:
        """Start or stop ``inst`` to reach ``want`` (``None``: as it is). A refusal is a
        diagnostic and the instance is returned as it is, so the state says what it really is."""
        if want not in POWER_STATES or want == inst.state:
            return inst
        p = self.provider
        extra: dict[str, str] = {}
        token = p.join_tokens.get(inst.client_token) if want != STOPPED else None
        if token:
            # A warm-pool instance of a first-boot template: the token minted by its start op
            # goes into the copy it boots with now (the one of its launch has expired by then).
            try:
                extra["boot_user_data"] = with_join_token(inst.user_data, token)
            except ValueError as exc:
                diags.add_error(f"InvalidParameterValue: {exc}", f"starting instance {inst.id}")
                return inst
        action = p.store.stop if want == STOPPED else p.store.start
        try:
            return p.call(str(want), action, inst.id, epoch=p.fence, **extra)  # type: ignore[no-any-return]
        except (CloudError, CloudApiError) as exc:
            _error(diags, exc, f"{'stopping' if want == STOPPED else 'starting'} instance {inst.id}")
            return inst

    def read(self, ctx: ReadContext, current: State) -> State | None:
        """Refresh from the store; a terminated or unknown instance is reported gone (``None``)."""
        p = self.provider
        instance_id = current.get("id")
        if not instance_id:
            return None
        try:
            inst = p.call("read", p.store.get, instance_id)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"reading instance {instance_id}")
            return current
        if inst is None or inst.state == TERMINATED:
            return None
        return _state(inst, current)

    def update(self, ctx: UpdateContext, current: State, planned: State) -> State | None:
        """``tags`` and ``power_state`` change in place (each journalled only when it changes);
        everything else forces replacement."""
        p = self.provider
        try:
            if (current.get("tags") or {}) != (planned.get("tags") or {}):
                inst = p.call("update", p.store.update_tags, current["id"], planned.get("tags") or {}, epoch=p.fence)
            else:
                inst = p.call("read", p.store.get, current["id"])
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"updating tags of {current.get('id')}")
            return current
        if inst is None or inst.state == TERMINATED:
            ctx.diagnostics.add_error(f"InvalidInstanceID.NotFound: no live instance {current.get('id')}")
            return current
        inst = self._power(ctx.diagnostics, inst, planned.get("power_state"))
        return _state(inst, planned)

    def delete(self, ctx: DeleteContext, current: State) -> None:
        """Terminate the instance; already gone is success."""
        p = self.provider
        instance_id = current.get("id")
        if not instance_id:
            return
        try:
            p.call("delete", p.store.delete, instance_id, epoch=p.fence)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"terminating instance {instance_id}")

    def import_(self, ctx: ImportContext, id: str) -> State | None:
        """Adopt an existing live instance by id."""
        p = self.provider
        try:
            inst = p.call("import", p.store.get, id)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"importing instance {id}")
            return None
        if inst is None or inst.state == TERMINATED:
            ctx.diagnostics.add_error(f"InvalidInstanceID.NotFound: no live instance {id}")
            return None
        return _state(inst)


def _image_state(image: Image, like: State | None = None) -> State:
    """The Terraform state of an image; null tags stay null if they were null."""
    state: State = {k: v for k, v in image.to_json().items() if k in _IMAGE_ATTRS}
    if like is not None and like.get("tags") is None and not image.tags:
        state["tags"] = None
    return state


class ImageResource(Resource):  # type: ignore[misc]
    """``xcesim_image``: an image made from an instance's files."""

    def __init__(self, provider: XceSimProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        """Type name without the provider prefix."""
        return "image"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        """Resource schema."""
        s = types.String()
        return schema.Schema(
            version=1,
            attributes=[
                schema.Attribute("name", s, required=True, requires_replace=True),
                schema.Attribute(
                    "instance_id", s, required=True, requires_replace=True, description="Instance to make it from."
                ),
                schema.Attribute("tags", types.Map(s), optional=True),
                schema.Attribute("id", s, computed=True, description="Image id (img-...)."),
                schema.Attribute("source_image", s, computed=True, description="The instance's own image."),
                schema.Attribute("created_at", s, computed=True, description="RFC 3339 creation time."),
                schema.Attribute("state", s, computed=True, description="available or deleted."),
            ],
        )

    def create(self, ctx: CreateContext, planned: State) -> State | None:
        """Make the image of the instance's files."""
        p = self.provider
        try:
            image = p.call(
                "create image",
                p.store.create_image,
                planned["instance_id"],
                planned["name"],
                planned.get("tags") or {},
                epoch=p.fence,
            )
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"making image {planned.get('name')!r} of {planned.get('instance_id')}")
            return None
        return _image_state(image, planned)

    def read(self, ctx: ReadContext, current: State) -> State | None:
        """Refresh from the store; a deleted or unknown image is reported gone (``None``)."""
        p = self.provider
        image_id = current.get("id")
        if not image_id:
            return None
        try:
            image = p.call("read image", p.store.get_image, image_id)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"reading image {image_id}")
            return current
        if image is None or image.state != AVAILABLE:
            return None
        return _image_state(image, current)

    def update(self, ctx: UpdateContext, current: State, planned: State) -> State | None:
        """Only ``tags`` change in place."""
        p = self.provider
        try:
            image = p.call(
                "update image", p.store.update_image_tags, current["id"], planned.get("tags") or {}, epoch=p.fence
            )
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"updating tags of {current.get('id')}")
            return current
        return _image_state(image, planned)

    def delete(self, ctx: DeleteContext, current: State) -> None:
        """Delete the image and its files; already gone is success."""
        p = self.provider
        image_id = current.get("id")
        if not image_id:
            return
        try:
            p.call("delete image", p.store.delete_image, image_id, epoch=p.fence)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, f"deleting image {image_id}")


class ImagesDataSource(DataSource):  # type: ignore[misc]
    """``xcesim_images``: available images whose tags contain every pair of ``tags``."""

    def __init__(self, provider: XceSimProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        """Type name without the provider prefix."""
        return "images"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        """Data source schema."""
        return schema.Schema(
            attributes=[
                schema.Attribute("tags", types.Map(types.String()), optional=True),
                schema.Attribute("images", types.List(_image_object_type()), computed=True),
            ]
        )

    def read(self, ctx: ReadDataContext, config: Config) -> State | None:
        """List the matching images, oldest first."""
        p = self.provider
        try:
            found = p.call("list images", p.store.list_images, config.get("tags") or {})
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, "listing images")
            return None
        return {"tags": config.get("tags"), "images": [_image_state(i) for i in found]}


class InstancesDataSource(DataSource):  # type: ignore[misc]
    """``xcesim_instances``: instances whose tags contain every pair of ``tags``.

    Live instances only, unless ``recently_terminated`` is true: then also those terminated in
    the last hour, with ``state = "terminated"``, their ``state_reason`` (so that a reader can
    tell a spot reclaim from an out-of-band delete) and ``terminated_at``.
    """

    def __init__(self, provider: XceSimProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        """Type name without the provider prefix."""
        return "instances"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        """Data source schema."""
        return schema.Schema(
            attributes=[
                schema.Attribute("tags", types.Map(types.String()), optional=True),
                schema.Attribute(
                    "recently_terminated",
                    types.Bool(),
                    optional=True,
                    description="Also list instances terminated in the last hour (default false).",
                ),
                schema.Attribute("instances", types.List(_instance_object_type()), computed=True),
            ]
        )

    def read(self, ctx: ReadDataContext, config: Config) -> State | None:
        """List the matching instances, oldest first."""
        p = self.provider
        tags = config.get("tags") or {}
        recent = bool(config.get("recently_terminated"))
        try:
            found = p.call("list", p.store.list_instances, tags, include_terminated=recent)
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, "listing instances")
            return None
        if recent:
            # RFC 3339 UTC with second precision compares as text. O(terminated instances of
            # the filter) per read: acceptable for the simulation, documented in the module.
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - RECENTLY_TERMINATED_SECONDS))
            found = [i for i in found if i.state != TERMINATED or i.terminated_at >= since]
        try:
            noticed = {n.instance_id: n for n in p.call("read", p.store.list_notices, [i.id for i in found])}
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, "listing interruption notices")
            return None
        return {
            "tags": config.get("tags"),
            "recently_terminated": config.get("recently_terminated"),
            "instances": [
                {
                    **{k: v for k, v in _state(i).items() if k in _INSTANCE_ATTRS},
                    "state_reason": i.state_reason,
                    "terminated_at": i.terminated_at or None,
                    **_notice_attrs(noticed.get(i.id)),
                }
                for i in found
            ],
        }


def _notice_attrs(notice: Notice | None) -> dict[str, str | None]:
    """A listed instance's ``interruption_at``/``reclaim_at`` (null without a notice)."""
    if notice is None:
        return dict.fromkeys(_NOTICE_ATTRS)
    doc = notice.to_json()
    return {"interruption_at": str(doc["noticed_at"]), "reclaim_at": str(doc["reclaim_at"])}


def _flavor_object_type() -> ObjectType:
    n = types.Number()
    return ObjectType(
        {
            "name": types.String(),
            "cpus": n,
            "memory_gb": n,
            "gpus": n,
            "cost_per_hour": n,
            "zones": types.List(types.String()),
        }
    )


class FlavorsDataSource(DataSource):  # type: ignore[misc]
    """``xcesim_flavors``: the cloud's flavor catalogue (``catalogue.py``), by name."""

    def __init__(self, provider: XceSimProvider) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        """Type name without the provider prefix."""
        return "flavors"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        """Data source schema."""
        return schema.Schema(attributes=[schema.Attribute("flavors", types.List(_flavor_object_type()), computed=True)])

    def read(self, ctx: ReadDataContext, config: Config) -> State | None:
        """List the catalogue."""
        p = self.provider
        try:
            # Its own connection to the store's file: read once per catalogue read.
            found = p.call("list flavors", catalogue.flavors, Database(p.store.path))
        except (CloudError, CloudApiError) as exc:
            _error(ctx.diagnostics, exc, "listing flavors")
            return None
        return {"flavors": [f.to_json() for f in found]}


class _StopIsNotShutdown(tf.runner._ShutdownInterceptor):  # type: ignore[misc]
    """Serve on after ``StopProvider``; only go-plugin's ``Shutdown`` ends the server.

    ``tf`` 1.2 stops its gRPC server with no grace on ``StopProvider``. Terraform sends that
    call when it is interrupted, to mean "halt what you can, then answer" (plugin protocol),
    and then waits for the calls in flight to return before it writes its state. Killing the
    server there aborted those calls: an instance launched by a create in flight existed in
    the cloud but never reached the state. Here the calls in flight finish and are reported,
    and Terraform (which makes no new call after the stop) ends the plugin as usual.
    """

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        result = continuation(handler_call_details)
        if handler_call_details.method == "/plugin.GRPCController/Shutdown":
            self.stopped = True
            if self.server:
                self.server.stop(grace=0)
        return result


def serve_attached() -> None:
    """``--dev`` mode, as the bundled engine's worker starts it (``clients.terraform.attach``).

    The worker hands the address this mode prints to Terraform (``TF_REATTACH_PROVIDERS``), so
    one process serves every walk of one Terraform command. SIGINT is ignored: Terraform's
    graceful stop reaches a provider as the ``StopProvider`` call, and a signal would kill it
    with calls in flight (go-plugin's servers ignore it for the same reason). The process ends
    when its standard input ends: the worker holds the other end for exactly as long as its
    command runs, and loses it however it dies.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        os._exit(0)  # nobody will call this provider again; nothing of ours is half-written

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


def main() -> None:
    """Serve the provider to Terraform (go-plugin handshake on stdout; ``--dev``: attached)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # run_provider looks the interceptor class up in its module when it builds the server.
    tf.runner._ShutdownInterceptor = _StopIsNotShutdown
    if "--dev" in sys.argv[1:]:
        serve_attached()
    run_provider(XceSimProvider(), sys.argv)


if __name__ == "__main__":
    main()
