"""The xcesim module's example initialises, validates and plans with the bundled engine, offline.

The simulated cloud's provider comes from the toolkit's local mirror, as in every working
directory the orchestrator builds (``orchestrator.services.validate`` runs the same init and
validate). The aws and openstack examples are checked statically in test_modules_static.py:
their providers cannot be installed without the network.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, plugin_cache_dir
from orchestrator.sim.cloud.store import CloudStore

MODULE = Path(__file__).resolve().parents[3] / "terraform" / "modules" / "xcesim"


def test_the_xcesim_example_validates_and_plans_two_instances(tmp_path: Path) -> None:
    # A copy, so that init's .terraform/ and the example's store stay out of the checkout;
    # the example reaches its module as ../.., so the whole module is copied.
    module = tmp_path / "xcesim"
    shutil.copytree(MODULE, module, ignore=shutil.ignore_patterns(".terraform*", "*.sqlite*"))
    example = module / "examples" / "basic"
    cli_config = ensure_mirror(tmp_path / "tf", [XCESIM])
    engine = BundledEngine(cli_config=cli_config, plugin_cache_dir=plugin_cache_dir(cli_config.parent))

    engine.init(example)
    assert [d.summary for d in engine.validate(example) if d.severity == "error"] == []

    plan = engine.plan(example)
    assert plan.summary.add == 2 and plan.summary.change == 0 and plan.summary.remove == 0
    created = sorted(c.addr for c in plan.changes)
    assert created == [
        'module.instances.xcesim_instance.this["op-6745a1b2-3f9c01-000"]',
        'module.instances.xcesim_instance.this["op-6745a1b2-3f9c01-001"]',
    ]
    assert {c.action for c in plan.changes} == {"create"}
    # The plan configured the provider on the example's own store, read the `tagged` listing
    # from it, and launched nothing.
    assert (example / "cloud.sqlite").is_file()
    assert CloudStore(example / "cloud.sqlite").list_instances({"xce:cluster": "demo"}) == []
