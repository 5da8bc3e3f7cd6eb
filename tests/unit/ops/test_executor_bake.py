"""The bake op and the image delete through a fake Terraform engine and an in-memory controller.

What a user would notice: the intent is committed before the cloud is touched; the builder is
returned after a success and after a failed play; an image is made once per op id; ops on the
instances never touch an image; a delete is intent first, dry-runnable, and refuses an image
that is not this cluster's bake; ``bake:newest`` resolves to the newest bake or is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tffake import ROOT, FakeEngine, MemoryFacts, unit_executor, unit_ops

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import FinalError, LeaseLost, UsageError
from orchestrator.model.facts import FactKind
from orchestrator.model.images import BakedImage, BuiltFrom, with_template_image
from orchestrator.ops.executor import Created, Executor
from orchestrator.ops.images import resolve_baked
from orchestrator.ops.openops import open_ops
from orchestrator.workspace.workdir import ProviderWorkdir

BUILT = BuiltFrom("debian-12", "1.1.0", "ab" * 32, "none")


def state(loaded: LoadedConfig) -> dict[str, Any]:
    return FakeEngine.state(ProviderWorkdir(loaded.config, "sim", ROOT).path)


def baked(
    executor: Executor, op_id: str, outcome: str = "changed", facts: MemoryFacts | None = None
) -> tuple[Any, list[str]]:
    """A bake whose play answers ``outcome``; what it returned and the fact kinds of ``facts``
    (the executor's) the play saw."""
    seen: list[str] = []

    def run(provider: str, builder: Created) -> str:
        seen.extend(facts.kinds() if facts is not None else [])
        return outcome

    return executor.bake("sim", "cpu", op_id, BUILT, run), seen


def test_a_bake_intends_first_makes_one_image_and_returns_its_builder(loaded: LoadedConfig) -> None:
    engine = FakeEngine()
    facts = MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    result, seen = baked(executor, "op-6b000000-000000000001", facts=facts)

    # The intent before the builder's apply, the builder's creation before the play; no expectedHost.
    assert seen == ["requestIntent", "instanceCreated"]
    first_apply = next(i for i, (call, _path) in enumerate(engine.calls) if call == "apply")
    assert first_apply > 0 and facts.facts("sim")[0].detail.startswith("bake: image")
    assert "expectedHost" not in facts.kinds()
    # The builder starts from the base image, tagged a builder, with no user data (nothing per-host to bake in).
    [builder] = [v["instances"]["op-6b000000-000000000001-000"] for v in engine.plan_variables if v.get("instances")][
        :1
    ]
    assert builder["image"] == "debian-12" and builder["user_data"] == "" and builder["tags"]["xce:kind"] == "builder"
    # The image is in the state, tagged; the builder is gone (returned).
    images = state(loaded)["images"]
    assert list(images) == ["op-6b000000-000000000001-image"]
    tags = images["op-6b000000-000000000001-image"]["tags"]
    assert tags["xce:kind"] == "image" and tags["xce:template"] == "cpu" and tags["xce:built-from-image"] == "debian-12"
    assert tags["xce:op_id"] == "op-6b000000-000000000001" and tags["xce:epoch"] == "3.7"
    assert state(loaded)["instances"] == {}
    assert result.image_id == "img-op-6b000000-000000000001-image" and result.returned
    assert facts.kinds()[-2:] == ["returning", "returned"]

    # The same op id again: nothing new is made.
    again, _ = baked(executor, "op-6b000000-000000000001")
    assert again.image_id == result.image_id and again.outcome == "already baked"
    assert list(state(loaded)["images"]) == ["op-6b000000-000000000001-image"]


def test_a_failed_play_returns_the_builder_and_makes_no_image(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, FakeEngine(), facts=facts)
    with pytest.raises(FinalError, match=r"did not succeed .*builder is returned"):
        baked(executor, "op-6b000000-000000000002", "failed: at task 'install': boom")
    assert state(loaded)["instances"] == {} and state(loaded).get("images", {}) == {}
    assert facts.kinds() == ["requestIntent", "instanceCreated", "returning", "returned"]


def test_an_op_on_the_instances_keeps_the_images(loaded: LoadedConfig) -> None:
    engine = FakeEngine()
    executor = unit_executor(loaded, engine)
    baked(executor, "op-6b000000-000000000003")
    created = executor.create("sim", "cpu", 2)
    assert len(created.created) == 2
    assert list(state(loaded)["images"]) == ["op-6b000000-000000000003-image"]
    executor.return_instances("sim", [c.key for c in created.created])
    assert list(state(loaded)["images"]) == ["op-6b000000-000000000003-image"]


def _listed(executor: Executor) -> BakedImage:
    [(_key, image)] = state_images(executor).items()
    return BakedImage(image["id"], image["name"], "", "available", dict(image["tags"]))


def state_images(executor: Executor) -> dict[str, Any]:
    return dict(FakeEngine.state(executor.workdir("sim").path)["images"])


def test_an_image_delete_is_dry_runnable_intent_first_and_refuses_a_foreign_image(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, FakeEngine(), facts=facts)
    baked(executor, "op-6b000000-000000000004")
    image = _listed(executor)
    before = list(facts.kinds())

    dry = executor.delete_image("sim", image, "op-6b000000-0000000000d1", dry_run=True)
    assert dry.deleted == ["op-6b000000-000000000004-image"] and facts.kinds() == before
    assert state_images(executor)

    foreign = BakedImage("img-x", "x", "", "available", {**image.tags, "xce:cluster": "elsewhere"})
    with pytest.raises(UsageError, match="not a baked image of cluster unit"):
        executor.delete_image("sim", foreign, "op-6b000000-0000000000d2")
    unkind = BakedImage(image.id, "x", "", "available", {k: v for k, v in image.tags.items() if k != "xce:kind"})
    with pytest.raises(UsageError, match="refused, nothing deleted"):
        executor.delete_image("sim", unkind, "op-6b000000-0000000000d3")

    executor.delete_image("sim", image, "op-6b000000-0000000000d4")
    assert state_images(executor) == {}
    mine = [f for f in facts.facts("sim") if f.op_id == "op-6b000000-0000000000d4"]
    assert [(f.kind, f.instance_id, f.detail) for f in mine] == [
        (FactKind.RETURNING, image.id, "image"),
        (FactKind.RETURNED, image.id, "image"),
    ]


def test_bake_newest_resolves_to_the_newest_bake_or_is_refused(loaded: LoadedConfig) -> None:
    engine = FakeEngine()
    ops = unit_ops(loaded, engine)
    executor = ops.executor
    config = with_template_image(loaded.config, "cpu", "sim", "bake:newest")
    shard0 = executor.workdir("sim")
    with pytest.raises(UsageError, match=r"image: bake:newest, but no bake of template cpu exists on provider sim"):
        resolve_baked(config, engine, shard0, "cpu")
    baked(executor, "op-6b000000-000000000005")
    resolved = resolve_baked(config, engine, shard0, "cpu")
    assert resolved.templates["cpu"].providers["sim"].image == "img-op-6b000000-000000000005-image"
    # A template naming a concrete image is left as it is; gpu has no bake and asks for none.
    assert resolve_baked(loaded.config, engine, shard0, "cpu") is loaded.config
    # The executor's create renders the resolved id.
    ops.parts.config = config
    made = executor.create("sim", "cpu", 1)
    desired = ProviderWorkdir(config, "sim", ROOT).desired.read()
    assert desired[made.created[0].key].image == "img-op-6b000000-000000000005-image"


def test_resume_returns_the_builder_of_an_interrupted_bake(loaded: LoadedConfig) -> None:
    facts = MemoryFacts()
    boots: list[str] = []

    def boot(provider: str, made: Sequence[Created]) -> dict[str, str]:
        boots.extend(c.key for c in made)
        return {c.name: "ok" for c in made}

    executor = unit_executor(loaded, FakeEngine(), facts=facts, bootstrap=boot)

    def crash(provider: str, builder: Created) -> str:
        raise LeaseLost("the lease lapsed during the play (simulated crash)")

    with pytest.raises(LeaseLost):
        executor.bake("sim", "cpu", "op-6b000000-000000000006", BUILT, crash)
    # Killed before the builder's fact: the op is open, its builder in the state.
    facts.committed = [f for f in facts.committed if f.kind == FactKind.REQUEST_INTENT]
    assert [o.detail.split(":")[0] for o in open_ops(facts.facts("sim"))] == ["bake"]
    [done] = executor.resume("sim")
    assert done.outcome == "completed" and "builder recorded and returned" in done.reason
    assert state(loaded)["instances"] == {} and boots == []  # never bootstrapped as a host
    assert "expectedHost" not in facts.kinds() and open_ops(facts.facts("sim")) == []


def test_destroy_all_deletes_the_kept_images_after_the_instances(loaded: LoadedConfig) -> None:
    from orchestrator.services.destroy import destroy

    facts = MemoryFacts()
    ops = unit_ops(loaded, FakeEngine(), facts=facts)
    executor = ops.executor
    baked(executor, "op-6b000000-000000000009")
    made = executor.create("sim", "cpu", 1)
    dry = destroy(loaded, ROOT, all_instances=True, dry_run=True, wired=ops)
    assert dry.images == {"sim": ["img-op-6b000000-000000000009-image"]} and state_images(executor)
    done = destroy(loaded, ROOT, all_instances=True, wired=ops)
    assert done.removed == {"sim": [made.created[0].key]}
    assert done.images == {"sim": ["img-op-6b000000-000000000009-image"]}
    assert state_images(executor) == {} and state(loaded)["instances"] == {}
    assert [f.kind for f in facts.committed if f.detail == "image"] == [FactKind.RETURNING, FactKind.RETURNED]
