"""What the cloud says about one provider's working directory: drift and the tagged listing.

Two views, both from ONE refresh-only plan of the working directory (``terraform plan
-refresh-only -out`` then ``terraform show -json`` of that plan); the state is never written:

* :class:`Drift`: the instances of Terraform's state that the cloud no longer has (``deleted``:
  instance key → the id the state knew) or has with other attributes (``changed``). It sees
  only what Terraform manages: an instance Terraform never recorded is invisible to it.
* :class:`Listing`: the module's ``tagged`` output, every object carrying this cluster's
  ``xce:cluster`` tag whoever made it, with its state and (where the cloud tells) why it left
  ``running``. It sees what the state does not (a twin from a lost create response, a stray),
  but only where the module can list by tag (``tagged_supported``). Its tags are the cloud's
  labels read back through the module's label map (``orchestrator/model/labels.py``), so an
  object's ``tags`` are under the toolkit's keys (``xce:cluster``...) whatever the cloud calls
  them, and a label that is no written form of a toolkit value stays its own text. Its
  ``images``: the module's ``tagged_images`` output, the cluster's baked images (docs/images.md),
  their labels read back the same way.

Everything here comes from the cloud and the state, so it is untrusted: types are checked,
sizes are capped, nothing is evaluated. A view that cannot be read, or reads as malformed,
raises :class:`~orchestrator.errors.TerraformError`: callers treat that as "view unread" and
do nothing destructive on it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import TerraformError
from orchestrator.model.hostnames import address_problem
from orchestrator.model.images import BakedImage
from orchestrator.model.labels import AS_IS, LabelMap
from orchestrator.model.modules import drift_types
from orchestrator.workspace.desired import DESIRED

# Caps on what is believed. Far above any real cluster, low enough that a hostile or broken
# state or cloud cannot make the orchestrator hold gigabytes.
MAX_OBJECTS = 100_000
MAX_TAGS = 256
MAX_TEXT = 4096
MAX_ID = 256

_INSTANCE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


@dataclass(frozen=True)
class Drift:
    """Managed instances changed behind Terraform's back, by instance key."""

    deleted: dict[str, str] = field(default_factory=dict, hash=False)
    changed: dict[str, list[str]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class CloudObject:
    """One object of the tagged listing, as the cloud reports it."""

    id: str
    name: str
    address: str
    tags: dict[str, str] = field(hash=False)
    state: str
    state_reason: str
    launch_time: str
    # When the cloud terminated it (RFC 3339; "" while live, or a module that does not say).
    terminated_at: str = ""


@dataclass(frozen=True)
class Listing:
    """The cluster's tagged objects. ``supported=False``: the module cannot list; ``objects`` says nothing.

    ``images``: the cluster's tagged images (a root without the ``tagged_images`` output lists none).
    """

    supported: bool
    objects: list[CloudObject] = field(default_factory=list, hash=False)
    images: list[BakedImage] = field(default_factory=list, hash=False)

    def by_id(self) -> dict[str, CloudObject]:
        """The objects keyed by cloud id."""
        return {obj.id: obj for obj in self.objects}


@dataclass(frozen=True)
class CloudViews:
    """Both views, read from the same refresh-only plan."""

    drift: Drift
    listing: Listing


def read_drift(engine: Engine, workdir: Path) -> Drift:
    """Drift of the working directory's managed instances (one refresh-only plan)."""
    # The drift carries no tags: any label map reads it the same.
    return read_views(engine, workdir, AS_IS).drift


def read_listing(engine: Engine, workdir: Path, labels: LabelMap) -> Listing:
    """The module's ``tagged`` output after a refresh (one refresh-only plan), tags read through ``labels``."""
    return read_views(engine, workdir, labels).listing


def read_views(engine: Engine, workdir: Path, labels: LabelMap) -> CloudViews:
    """Drift and listing from one refresh-only plan: half the cloud reads of calling both.

    ``labels``: the module's label map (``ProviderWorkdir.labels``), through which the
    listing's tags are read. Raises TerraformError when the plan fails (the cloud cannot be
    read) or its document is malformed.
    """
    workdir = Path(workdir)
    if not (workdir / DESIRED).is_file():
        raise TerraformError(f"{workdir}: no desired set ({DESIRED}); the cloud view cannot be read")
    # A private, unique name: two readers never share a plan file, and a saved plan holds the
    # refreshed state (settings, user data), so it does not outlive the read.
    plan_file = Path(f".cloudview-{secrets.token_hex(6)}.tfplan")
    try:
        engine.plan(workdir, var_files=[Path(DESIRED)], out=plan_file, refresh_only=True)
        document = engine.show_plan(workdir, plan_file)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(workdir / plan_file)
    return CloudViews(drift=drift_from_plan(document), listing=listing_from_plan(document, labels))


def read_drift_stream(engine: Engine, workdir: Path, ids: Callable[[], Mapping[str, str]]) -> Drift:
    """Drift alone from one refresh-only plan's ``-json`` stream: no saved plan, no ``show -json``.

    For a working directory whose listing is not needed (a shard >= 1): see
    :func:`drift_from_stream`. Saves the ``show -json`` of the plan, which loads every provider
    schema again and renders the whole refreshed state.
    """
    workdir = Path(workdir)
    if not (workdir / DESIRED).is_file():
        raise TerraformError(f"{workdir}: no desired set ({DESIRED}); the cloud view cannot be read")
    return drift_from_stream(engine.plan(workdir, var_files=[Path(DESIRED)], refresh_only=True), ids)


def drift_from_stream(result: PlanResult, ids: Callable[[], Mapping[str, str]]) -> Drift:
    """The :class:`Drift` of managed instances in any plan's ``-json`` stream (its ``resource_drift``).

    A refresh-only plan and a normal plan both refresh first and both report what the refresh
    found changed outside Terraform: an instance the cloud deleted is a drift ``delete`` in
    either (a normal plan then also plans a ``create`` for its key when it is still desired).
    The stream names each drifted instance and its action but not its former values, so the ids
    of deleted instances come from ``ids()`` (instance key → cloud id, e.g. from the Terraform
    state), asked only when something was deleted; ``changed`` lists the keys without attribute
    names.
    """
    # Only the registered modules' host resources (orchestrator/model/modules.py): drift of
    # anything else (a data source, an auxiliary resource) says nothing about hosts.
    hosts = drift_types()
    drifted = [c for c in result.drift if c.type in hosts and not c.addr.startswith("data.")]
    if len(drifted) > MAX_OBJECTS:
        raise TerraformError(f"plan: {len(drifted)} drifted resources, more than {MAX_OBJECTS}")
    deleted_keys: list[str] = []
    changed: dict[str, list[str]] = {}
    for change in drifted:
        key = change.key
        if not isinstance(key, str) or not _INSTANCE_KEY.match(key):
            raise TerraformError(f"plan: {change.addr[:MAX_TEXT]}: {key!r} is not an instance key")
        if change.action == "delete":
            deleted_keys.append(key)
        elif change.action == "update":
            changed[key] = []
    known = ids() if deleted_keys else {}
    return Drift(deleted={k: _text(known.get(k), f"instance {k}: id", MAX_ID) for k in deleted_keys}, changed=changed)


def drift_from_plan(document: Mapping[str, Any]) -> Drift:
    """The :class:`Drift` in a ``show -json`` plan document (its ``resource_drift``)."""
    entries = document.get("resource_drift") or []
    if not isinstance(entries, list):
        raise TerraformError("refresh-only plan: resource_drift is not a list")
    if len(entries) > MAX_OBJECTS:
        raise TerraformError(f"refresh-only plan: {len(entries)} drifted resources, more than {MAX_OBJECTS}")
    deleted: dict[str, str] = {}
    changed: dict[str, list[str]] = {}
    hosts = drift_types()  # as in drift_from_stream
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("mode") != "managed":
            continue
        if entry.get("type") not in hosts:
            continue
        where = f"refresh-only plan: {_text(entry.get('address'), 'address', MAX_TEXT)}"
        key = entry.get("index")
        if not isinstance(key, str) or not _INSTANCE_KEY.match(key):
            raise TerraformError(f"{where}: instance key {key!r} is not an instance key")
        change = entry.get("change")
        if not isinstance(change, Mapping):
            raise TerraformError(f"{where}: change is not an object")
        actions = change.get("actions")
        before, after = change.get("before"), change.get("after")
        if actions == ["delete"]:
            if not isinstance(before, Mapping):
                raise TerraformError(f"{where}: a deleted instance without its former values")
            deleted[key] = _text(before.get("id"), f"{where}: id", MAX_ID, empty=False)
        elif actions == ["update"]:
            if not isinstance(before, Mapping) or not isinstance(after, Mapping):
                raise TerraformError(f"{where}: an updated instance without its values")
            names = set(before) | set(after)
            if len(names) > MAX_TAGS:
                raise TerraformError(f"{where}: {len(names)} attributes, more than {MAX_TAGS}")
            changed[key] = sorted(
                _text(n, f"{where}: attribute", MAX_TEXT) for n in names if before.get(n) != after.get(n)
            )
    return Drift(deleted=deleted, changed=changed)


def listing_from_plan(document: Mapping[str, Any], labels: LabelMap) -> Listing:
    """The :class:`Listing` in a ``show -json`` plan document (root outputs ``tagged``, ``tagged_supported``),
    each object's labels read back as tags through ``labels``."""
    planned = document.get("planned_values")
    outputs = planned.get("outputs") if isinstance(planned, Mapping) else None
    if not isinstance(outputs, Mapping):
        raise TerraformError("refresh-only plan: no root outputs (is this a provider root?)")
    supported = _output(outputs, "tagged_supported")
    if not isinstance(supported, bool):
        raise TerraformError(f"output tagged_supported: {supported!r} is not true or false")
    if not supported:
        # The images are listed on their own (a module may list images and not instances).
        return Listing(supported=False, images=images_from(outputs, labels))
    tagged = _output(outputs, "tagged")
    if not isinstance(tagged, Mapping):
        raise TerraformError("output tagged: not a map of cloud id to object")
    if len(tagged) > MAX_OBJECTS:
        raise TerraformError(f"output tagged: {len(tagged)} objects, more than {MAX_OBJECTS}")
    objects = [_cloud_object(key, value, labels) for key, value in tagged.items()]
    return Listing(
        supported=True,
        objects=sorted(objects, key=lambda o: (o.launch_time, o.id)),
        images=images_from(outputs, labels),
    )


def images_from(outputs: Mapping[str, Any], labels: LabelMap) -> list[BakedImage]:
    """The ``tagged_images`` output of a root's outputs (none when the root has no such output),
    oldest first; checked like the instance listing (untrusted)."""
    item = outputs.get("tagged_images")
    if not isinstance(item, Mapping) or "value" not in item:
        return []
    tagged = item["value"] or {}
    if not isinstance(tagged, Mapping) or len(tagged) > MAX_OBJECTS:
        raise TerraformError(f"output tagged_images: not a map of at most {MAX_OBJECTS} image ids to objects")
    images = [_image(key, value, labels) for key, value in tagged.items()]
    return sorted(images, key=lambda i: (i.created, i.id))


def _image(key: object, value: object, labels: LabelMap) -> BakedImage:
    where = f"output tagged_images[{str(key)[:MAX_ID]!r}]"
    if not isinstance(value, Mapping):
        raise TerraformError(f"{where}: not an object")
    image_id = _text(value.get("id"), f"{where}.id", MAX_ID, empty=False)
    if image_id != key:
        raise TerraformError(f"{where}: keyed by another id than its own ({image_id!r})")
    return BakedImage(
        id=image_id,
        name=_text(value.get("name"), f"{where}.name", MAX_TEXT),
        created=_text(value.get("created_at"), f"{where}.created_at", MAX_TEXT),
        state=_text(value.get("state"), f"{where}.state", MAX_TEXT),
        tags=_tags(value, where, labels),
    )


def _tags(value: Mapping[str, Any], where: str, labels: LabelMap) -> dict[str, str]:
    """The ``tags`` of a listed object: a map of at most ``MAX_TAGS`` strings, read back through ``labels``."""
    tags = value.get("tags") or {}
    if not isinstance(tags, Mapping) or len(tags) > MAX_TAGS:
        raise TerraformError(f"{where}.tags: not a map of at most {MAX_TAGS} strings")
    return labels.from_labels(
        {
            _text(k, f"{where}.tags key", MAX_TEXT): _text(v, f"{where}.tags[{str(k)[:64]!r}]", MAX_TEXT)
            for k, v in tags.items()
        }
    )


def _output(outputs: Mapping[str, Any], name: str) -> Any:
    item = outputs.get(name)
    if not isinstance(item, Mapping) or "value" not in item:
        raise TerraformError(f"refresh-only plan: the root has no known output {name}")
    return item["value"]


def _cloud_object(key: object, value: object, labels: LabelMap) -> CloudObject:
    where = f"output tagged[{str(key)[:MAX_ID]!r}]"
    if not isinstance(value, Mapping):
        raise TerraformError(f"{where}: not an object")
    object_id = _text(value.get("id"), f"{where}.id", MAX_ID, empty=False)
    if object_id != key:
        raise TerraformError(f"{where}: keyed by another id than its own ({object_id!r})")
    return CloudObject(
        id=object_id,
        name=_text(value.get("name"), f"{where}.name", MAX_TEXT),
        # An address that is not one (model.hostnames) matches no host: "" as if unaddressed.
        address=_address(_text(value.get("address"), f"{where}.address", MAX_TEXT)),
        tags=_tags(value, where, labels),
        state=_text(value.get("state"), f"{where}.state", MAX_TEXT),
        # Not every module can tell why an object stopped (only xcesim does today): "" then.
        state_reason=_text(value.get("state_reason"), f"{where}.state_reason", MAX_TEXT),
        launch_time=_text(value.get("launch_time"), f"{where}.launch_time", MAX_TEXT),
        terminated_at=_text(value.get("terminated_at"), f"{where}.terminated_at", MAX_TEXT),
    )


def _address(value: str) -> str:
    return value if value and address_problem(value) is None else ""


def _text(value: object, what: str, limit: int, *, empty: bool = True) -> str:
    """A string of at most ``limit`` characters; null is "" where ``empty`` allows it."""
    if value is None and empty:
        return ""
    if not isinstance(value, str) or len(value) > limit or (not empty and not value):
        least = 0 if empty else 1
        raise TerraformError(f"{what}: {repr(value)[:80]} is not a string of {least} to {limit} characters")
    return value
