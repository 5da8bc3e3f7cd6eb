"""The scale-out benchmark: its verdicts and options, and one tiny real run so the bench cannot rot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import bench_scaleout
from bench.bench_scaleout import main

MEASURED: dict[str, Any] = {
    "burst": {"instances": 500, "loads": ["1.0"], "best": {"pg": 30.0, "local": 20.0}, "ratio": 1.5, "pass": False}
    | {"target": 1.2},
    "scan": {"instances": 1000, "ops": 100, "loads": ["1.0"], "best": {"pg": 11.0, "local": 10.0}}
    | {"ratio": 1.1, "target": 1.2, "pass": True},
    "takeover": {"measured": True, "seconds": 19.0, "ttl": 15.0, "grace": 0.0, "interval": 2.0, "pass": False}
    | {"read_seconds": 14.5, "read_pass": True, "load": "3.1 2.9 2.5"},
}


def test_check_fails_on_a_miss_and_reports_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_scaleout, "run", lambda *_args: MEASURED)
    assert main([]) == 0
    assert main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "pg / local = 1.50 (target <= 1.2) MISS" in out
    assert "pg / local = 1.10 (target <= 1.2) PASS" in out
    target = "(target <= TTL 15 + grace 0 + interval 2 s)"
    assert f"takeover: 14.5 s from the kill to the survivor's first cloud read {target} PASS" in out
    assert f"takeover: 19.0 s from the kill to its first mutation {target} MISS" in out
    # The first mutation is what --check holds to: a miss there fails it even with the read in time.
    monkeypatch.setattr(bench_scaleout, "run", lambda *_args: {"takeover": MEASURED["takeover"]})
    assert main(["--parts", "takeover", "--check"]) == 1
    monkeypatch.setattr(bench_scaleout, "run", lambda *_args: {"scan": MEASURED["scan"]})
    assert main(["--parts", "scan", "--check"]) == 0


def test_an_unknown_part_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--parts", "burst,lease"])
    assert exc.value.code == 2
    assert "--parts: unknown part lease" in capsys.readouterr().err


@pytest.mark.integration
def test_a_tiny_real_run_of_the_burst_and_the_scan(capsys: pytest.CaptureFixture[str]) -> None:
    """A real controller, Terraform and PostgreSQL: a burst of 2 and a scan over 2, each backend once."""
    from pg_server import skip_reason

    if skip_reason() is not None:
        pytest.skip(str(skip_reason()))
    assert main(["--parts", "burst,scan", "--burst", "2", "--scan", "2", "--ops", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "burst of 2: pg " in out and "orphan scan over 2: pg " in out
