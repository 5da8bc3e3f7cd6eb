"""A daemon prepares the working directories of providers it does not hold (a takeover starts
without ``terraform init``), and nothing it does for that changes a cloud or needs the lease."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import ROOT, FakeEngine, FakeFence, MemoryFacts, site_config, unit_executor

from orchestrator.daemon.warmup import warm
from orchestrator.workspace.workdir import ProviderWorkdir


def test_a_provider_another_daemon_holds_is_initialised_without_its_lease(tmp_path: Path) -> None:
    loaded = site_config(tmp_path)
    engine, facts, fence = FakeEngine(), MemoryFacts(), FakeFence()
    fence.revoked = True  # another daemon holds the lease: every gate is closed here
    executor = unit_executor(loaded, engine, fence=fence, facts=facts)
    workdir = ProviderWorkdir(loaded.config, "sim", ROOT).path
    assert not (workdir / ".terraform").exists()
    assert warm(executor, ["sim"]) == {}
    assert (workdir / ".terraform").is_dir()  # a takeover finds it initialised
    done = [call for call, _path in engine.calls]
    assert "init" in done and not {"plan", "apply"} & set(done)  # nothing planned, nothing applied
    assert facts.committed == []  # and nothing told the controller
    engine.calls.clear()
    assert warm(executor, ["sim"]) == {} and [c for c, _ in engine.calls if c == "init"] == []  # once


def test_a_provider_that_cannot_be_prepared_is_named_not_raised(tmp_path: Path) -> None:
    loaded = site_config(tmp_path)
    engine = FakeEngine()
    engine.fail_init = True
    executor = unit_executor(loaded, engine)
    failed = warm(executor, ["sim"])
    assert list(failed) == ["sim"] and "Failed to query available provider packages" in failed["sim"]
