"""The pull-cost benchmark's pure parts: one host's variables, its result, and the verdict it prints."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import bench_pull_cost
from bench import bootstrap_profile as prof
from bench.bench_bootstrap import lh
from bench.bench_pull_cost import PullRun, failure, host_vars, main, recap, verdict

INVENTORY = {
    "all": {
        "vars": {"ansible_user": "root", "ansible_ssh_common_args": "-o X=y", "shared": "all", "level": "all"},
        "hosts": {
            "b000": {"ansible_host": "127.0.0.2", "ansible_port": 2200, "xce_instance_id": "i-b000", "level": "host"},
            "b001": {"ansible_host": "127.0.0.3", "xce_instance_id": "i-b001"},
        },
        "children": {
            "template_cpu": {
                "hosts": {"b000": None},
                "vars": {"xce_bootstrap_roles": ["site_role"], "level": "group"},
                "site_vars": {"site_only": 1},
            },
            "template_gpu": {"hosts": {"b001": None}, "vars": {"gpu": True}},
        },
    }
}

RECAP_OK = (
    "TASK [xce_node_manager : Check the supervised node manager] ****\nok: [localhost]\n\n"
    "PLAY RECAP ****\nlocalhost                  : ok=28   changed=9    unreachable=0    failed=0    "
    "skipped=13   rescued=0    ignored=0   \n"
)


def test_a_hosts_variables_are_its_groups_then_its_own_without_the_ssh_ones() -> None:
    got = host_vars(INVENTORY, "b000")
    assert got == {
        "shared": "all",
        "level": "host",
        "xce_instance_id": "i-b000",
        "xce_bootstrap_roles": ["site_role"],
        "site_only": 1,
    }
    # Another host gets its own group's variables, not b000's.
    assert host_vars(INVENTORY, "b001") == {"shared": "all", "level": "all", "xce_instance_id": "i-b001", "gpu": True}


def test_a_host_is_bootstrapped_only_with_exit_0_a_clean_recap_and_its_check_ok() -> None:
    assert failure(0, RECAP_OK) is None
    assert failure(2, RECAP_OK) == f"exit 2, recap {recap(RECAP_OK)}"
    counts = {"ok": 28, "changed": 9, "unreachable": 0, "failed": 0, "skipped": 13, "rescued": 0, "ignored": 0}
    assert recap(RECAP_OK) == counts
    assert failure(0, RECAP_OK.replace("failed=0", "failed=1")) == "recap " + str(counts | {"failed": 1})
    assert failure(0, "ERROR! the playbook could not be found") == "recap missing"
    skipped = RECAP_OK.replace("ok: [localhost]\n\n", "skipping: [localhost]\n\n")
    assert failure(0, skipped) == "the task 'Check the supervised node manager' did not run ok"


def test_the_verdict_gives_the_ratio_against_the_target_and_the_cpu_against_push() -> None:
    small = PullRun(20, 50.0, [5.0] * 20, None)
    assert verdict(small, PullRun(100, 250.0, [5.0] * 100, None)) == (
        "pull 100 / 20 hosts = 5.00 (linear 5.00, target <= 3.5) MISS; CPU per host 5.00 s vs push's ~4.8 s (1.04)"
    )
    # At 50 / 20 the target is the same share of linear: 0.7 x 2.5.
    assert "pull 50 / 20 hosts = 2.00 (linear 2.50, target <= 1.75) MISS" in verdict(
        small, PullRun(50, 100.0, [5.0], None)
    )
    assert verdict(small, PullRun(100, 150.0, [4.0] * 100, None)).startswith("pull 100 / 20 hosts = 3.00")
    assert "PASS" in verdict(small, PullRun(100, 175.0, [4.0] * 100, None))


def test_check_exits_1_on_a_miss_and_0_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    walls = {20: 50.0, 100: 250.0}
    monkeypatch.setattr(lh, "sshd_available", lambda: True)
    monkeypatch.setattr(bench_pull_cost, "host_python", lambda base: base / "python")
    monkeypatch.setattr(prof, "cpu_split", lambda: contextlib.nullcontext(None))
    monkeypatch.setattr("orchestrator.sim.nodemanager.build_artifact", lambda dest: dest / "artifact.tar.gz")
    monkeypatch.setattr(bench_pull_cost, "run_pulls", lambda _base, n, *_rest: PullRun(n, walls[n], [5.0] * n, None))
    assert main([]) == 0
    assert main(["--check"]) == 1
    walls[100] = 150.0
    assert main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "pull 100 / 20 hosts = 5.00 (linear 5.00, target <= 3.5) MISS" in out
    assert "pull 100 hosts: wall  150.00 s, CPU per host mean 5.00 s" in out


def test_it_refuses_to_run_without_root_and_sshd(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lh, "sshd_available", lambda: False)
    assert main([]) == 2
    assert capsys.readouterr().err == "bench_pull_cost: needs root, sshd, unshare and nsenter (simulated hosts)\n"


def test_hosts_that_failed_are_named_and_fail_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = ["b017: exit 2, recap {'failed': 1}", "b002: exit 2, recap {'failed': 1}"]
    monkeypatch.setattr(lh, "sshd_available", lambda: True)
    monkeypatch.setattr(bench_pull_cost, "host_python", lambda base: base / "python")
    monkeypatch.setattr(prof, "cpu_split", lambda: contextlib.nullcontext(None))
    monkeypatch.setattr("orchestrator.sim.nodemanager.build_artifact", lambda dest: dest / "artifact.tar.gz")
    runs = {20: PullRun(20, 50.0, [5.0] * 20, None), 100: PullRun(100, 150.0, [5.0] * 100, None, failed)}
    monkeypatch.setattr(bench_pull_cost, "run_pulls", lambda _base, n, *_rest: runs[n])
    assert main([]) == 1  # though 150 / 50 would pass
    out = capsys.readouterr().out
    assert "FAILED on 2 of 100 hosts, e.g. b017: exit 2, recap {'failed': 1}; b002: exit 2" in out
