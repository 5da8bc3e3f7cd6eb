"""The daemon's flight recorder: only changes recorded, never a crash, and a pass's recording read back.

The last test runs the real :class:`Reconciler` (a fake Terraform engine, an in-memory fact log,
the daemon's stop guard around the executor's recorder) and feeds the recorder as the daemon
does; ``xceprov record export`` and ``record show`` then read the recording back.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.clients.controller.types import HostEvent, HostInfo
from orchestrator.configfile import LoadedConfig, load_config
from orchestrator.daemon.flightrecorder import FlightRecorder
from orchestrator.daemon.guarded import guard_parts
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.model.config import RecordingSettings
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.facts import FactKind
from orchestrator.model.recording import read_records
from orchestrator.ops.executor import Wired
from orchestrator.reconcile.loop import Reconciler
from orchestrator.workspace.recordings import read_period, recordings_dir
from tests.tffake import FakeEngine, FakeHosts, FakeView, StampedFacts, unit_parts

NOW = 1_800_000_000.0


def site(tmp_path: Path, recording: str = "") -> LoadedConfig:
    doc = {
        "cluster": "unit",
        "state_dir": str(tmp_path / "state"),
        "controller": {"ca": "system"},
        "providers": {"sim": {"module": "xcesim", "max_instances": 10}},
        "templates": {"cpu": {"providers": {"sim": {"flavor": "c8", "image": "debian-12", "cost_per_hour": 0.5}}}},
        "daemon": {"recording": json.loads(recording)} if recording else {},
    }
    path = tmp_path / "xceprov.yaml"
    path.write_text(json.dumps(doc))
    return load_config(str(path))


def snapshot(seq: int, wanted: int) -> DemandSnapshot:
    return DemandSnapshot(seq, 1, 0.0, (TemplateDemand("cpu", wanted),))


def written(recorder: FlightRecorder, state_dir: Path) -> list[str]:
    recorder.close()
    return [r.kind for r in read_period(recordings_dir(state_dir))]


def test_only_changes_are_recorded(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    metrics = DaemonMetrics()
    now = [NOW]
    recorder = FlightRecorder(
        loaded.config.state_dir, loaded.config.daemon.recording, lambda: now[0], metrics.recording
    )
    recorder.config(loaded.config)
    recorder.config(loaded.config)  # the same configuration again (a reload that changed nothing)
    recorder.demand(snapshot(1, 2))
    recorder.demand(snapshot(2, 2))  # a resync: the same picture under a new seq
    recorder.demand(snapshot(3, 4))
    recorder.notices([{"instance_key": "k1", "reclaim_at": NOW + 120}])
    recorder.notices([{"instance_key": "k1", "reclaim_at": NOW + 120}])
    assert written(recorder, loaded.config.state_dir) == ["config", "demand", "demand", "notice"]
    assert metrics.registry.get_sample_value("xceprov_recording_records_total", {"kind": "demand"}) == 2


def test_disabled_records_nothing(tmp_path: Path) -> None:
    loaded = site(tmp_path, '{"enabled": false}')
    recorder = FlightRecorder(loaded.config.state_dir, loaded.config.daemon.recording, lambda: NOW)
    recorder.demand(snapshot(1, 2))
    assert written(recorder, loaded.config.state_dir) == []


def test_a_failing_write_is_logged_once_counted_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the state directory should be")
    metrics = DaemonMetrics()
    recorder = FlightRecorder(blocked, RecordingSettings(), lambda: NOW, metrics.recording)
    with caplog.at_level(logging.WARNING, logger="orchestrator.daemon.flightrecorder"):
        recorder.demand(snapshot(1, 2))
        recorder.demand(snapshot(2, 3))
        recorder.host_event(HostEvent("joined", HostInfo("h1", "idle")))
    assert metrics.registry.get_sample_value("xceprov_recording_write_failures_total") == 3
    assert len([r for r in caplog.records if "not written" in r.getMessage()]) == 1


def test_a_pass_leaves_demand_decision_op_and_host_records_that_export_reads_back(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    config = loaded.config
    now = [NOW]
    engine, facts, hosts = FakeEngine(), StampedFacts(lambda: now[0]), FakeHosts()
    parts = unit_parts(loaded, engine, facts=facts, hosts=hosts, clock=lambda: now[0])
    guard = guard_parts(parts, Lifecycle(loaded, lambda: loaded), DaemonMetrics())  # as the daemon wires it
    recorder = FlightRecorder(config.state_dir, config.daemon.recording, lambda: now[0])
    guard.observer = recorder.facts
    view = FakeView(facts, hosts)
    reconciler = Reconciler(config, Wired.of(parts), view, clock=lambda: now[0], state_dir=config.state_dir)

    recorder.config(config)
    view.want(cpu=2)
    assert view.snapshot is not None
    recorder.demand(view.snapshot)
    recorder.after_pass(reconciler.run_once())
    for _ in range(3):  # the gap covered: one record saying so, then nothing new to write
        now[0] += 30
        recorder.after_pass(reconciler.run_once())
    expected = [f for f in facts.committed if f.kind is FactKind.EXPECTED_HOST]
    assert expected, "the pass launched nothing"
    info = HostInfo(expected[0].host_name, "idle", template="cpu", provider="sim", op_id=expected[0].op_id)
    recorder.host_event(HostEvent("joined", info, time=now[0]))
    recorder.close()

    out = tmp_path / "period.jsonl.gz"
    runner = CliRunner()
    result = runner.invoke(cli, ["--config", str(loaded.source), "record", "export", "-o", str(out), "--json-summary"])
    assert result.exit_code == 0, result.output
    records = list(read_records(gzip.decompress(out.read_bytes()).splitlines()))
    kinds = [r.kind for r in records]
    assert {"config", "demand", "decision", "op", "host"} <= set(kinds)
    assert kinds.count("decision") == 2
    assert [r.t for r in records] == sorted(r.t for r in records)
    decision, covered = (r for r in records if r.kind == "decision")
    assert covered.data["decisions"] == []
    assert decision.data["decisions"][0]["template"] == "cpu"
    assert decision.data["decisions"][0]["ops"][0]["count"] == 2
    assert "cpu" in decision.data["reasons"]
    assert {r.data["event"] for r in records if r.kind == "op"} == {"intent", "created"}
    intent = next(r for r in records if r.kind == "op" and r.data["event"] == "intent")
    assert (intent.data["template"], intent.data["count"], intent.data["provider"]) == ("cpu", 2, "sim")
    hosts = [(r.data["event"], r.data["host"]) for r in records if r.kind == "host"]
    assert ("expected", expected[0].host_name) in hosts and ("joined", expected[0].host_name) in hosts
    summary = json.loads(result.output)
    assert summary["counts"]["decision"] == 2 and summary["templates"] == ["cpu"]

    shown = runner.invoke(cli, ["record", "show", str(out)])
    assert shown.exit_code == 0, shown.output
    assert f"{len(records)} records" in shown.output and "templates: cpu" in shown.output


def test_recording_settings_parse_and_a_bad_one_names_its_key(tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    settings = site(tmp_path, '{"keep": "2d", "segment": "30m"}').config.daemon.recording
    assert (settings.enabled, settings.keep, settings.segment) == (True, 2 * 86400.0, 1800.0)
    with pytest.raises(ConfigError) as caught:
        site(tmp_path, '{"segment": "10s"}')
    assert "daemon.recording.segment" in str(caught.value)


def test_a_reload_changes_the_segment_and_disables_recording(tmp_path: Path) -> None:
    now = [NOW]
    first = site(tmp_path)
    recorder = FlightRecorder(first.config.state_dir, first.config.daemon.recording, lambda: now[0])
    recorder.config(first.config)
    off = site(tmp_path, '{"enabled": false, "segment": "2h"}')
    recorder.reload(off.config)
    assert recorder.writer.segment == 7200.0
    recorder.demand(snapshot(1, 5))
    assert written(recorder, first.config.state_dir) == ["config"]


def test_a_lost_host_and_a_refusal_are_recorded_with_their_reasons(tmp_path: Path) -> None:
    from orchestrator.model.facts import Epoch, Fact
    from orchestrator.reconcile.refusals import Refusal
    from orchestrator.reconcile.report import PassReport

    loaded = site(tmp_path)
    recorder = FlightRecorder(loaded.config.state_dir, loaded.config.daemon.recording, lambda: NOW)
    lost = Fact(FactKind.LOST, "sim", "op-1", Epoch(1, 1), instance_key="k1", detail="spot reclaim\nmore")
    recorder.facts([lost])
    refusal = Refusal("capacity", "sim", "c8@z1", 1, NOW, NOW, NOW + 300, "InsufficientInstanceCapacity")
    recorder.after_pass(PassReport("interval", NOW, NOW, [], {}, [], [], refused=[refusal]))
    recorder.close()
    host, refused = read_period(recordings_dir(loaded.config.state_dir))
    assert (host.kind, host.data["event"], host.data["key"], host.data["reason"]) == (
        "host",
        "lost",
        "k1",
        "spot reclaim",
    )
    assert (refused.kind, refused.data["placement"], refused.data["until"]) == ("refusal", "c8@z1", NOW + 300)
