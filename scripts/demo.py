"""`make demo`: the whole story on the embedded simulated world, as a readable timeline.

World up → work submitted → the burst previewed as a Terraform plan → the daemon bursts (the
preferred region, `spot`, has room for two hosts today: the rest falls back to `sim` by priority)
→ hosts bootstrapped over SSH → workers join, the work runs → hosts go idle → drained and returned
→ a summary (created, returned, left) → world down.

Every step is observed, not assumed: the driver watches what a user can watch (the commands'
JSON output, the simulated cloud's listing, the audit log) and exits 0 only when each step was
seen, within a deadline that names the step when it is missed. Everything it starts is stopped
on the way out, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE = Path(".xceprov")
AUDIT = STATE / "audit.log"
DAEMON_LOG = STATE / "demo-daemon.log"
WORK_HOSTS = 4
WORK_DURATION = "40s"
SPOT_ROOM = 2  # the preferred region's capacity today (a simulated-cloud fault on its flavor)
SPOT_FLAVOR = "c8.large.spot"
T0 = time.monotonic()


class NotObserved(Exception):
    """A step of the story was not seen within its deadline."""


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:5.0f}s] {text}", flush=True)


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def xceprov(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """Run one xceprov command; its output is shown unless ``quiet``."""
    proc = subprocess.run(["xceprov", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if not quiet:
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
    if check and proc.returncode != 0:
        raise NotObserved(f"xceprov {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def status() -> dict[str, Any]:
    return dict(json.loads(xceprov("status", "--json", quiet=True).stdout))


def instances(include_terminated: bool = False) -> list[dict[str, Any]]:
    """This cluster's instances in the simulated cloud (running ones unless told otherwise)."""
    args = ["sim", "cloud", "list", "--json", "--tag", "xce:cluster=demo"]
    found = json.loads(xceprov(*args, *(["--all"] if include_terminated else []), quiet=True).stdout)["instances"]
    return [i for i in found if include_terminated or i["state"] != "terminated"]


def audit_entries() -> list[dict[str, Any]]:
    if not AUDIT.exists():
        return []
    return [json.loads(line) for line in AUDIT.read_text().splitlines() if line.strip()]


def wait_for(what: str, seen: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    """Poll ``seen`` until it returns something true; NotObserved naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = seen()
        if value:
            return value
        if time.monotonic() > deadline:
            raise NotObserved(f"not observed within {timeout:.0f}s: {what}")
        time.sleep(every)


def by_provider(found: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in found:
        provider = i["tags"].get("xce:provider", "?")
        counts[provider] = counts.get(provider, 0) + 1
    return dict(sorted(counts.items()))


def demand_row(template: str) -> dict[str, Any]:
    rows = [r for r in status()["demand"] if r["template"] == template]
    return rows[0] if rows else {}


class Daemon:
    """`xceprov daemon` in the background, its log in a file."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = DAEMON_LOG.open("wb")
        # PYTHONFAULTHANDLER: a daemon that does not stop in time is asked (SIGABRT) where it is.
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        self.proc = subprocess.Popen(["xceprov", "daemon"], stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
        say(f"xceprov daemon started (pid {self.proc.pid}; its log: {DAEMON_LOG})")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            say(f"the daemon did not stop within 120s; its threads are dumped to {DAEMON_LOG}")
            self.proc.send_signal(signal.SIGABRT)
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def story(daemon: Daemon) -> dict[str, Any]:
    step("xceprov terraform lock: pin the Terraform provider versions every working directory uses")
    xceprov("terraform", "lock")

    step("xceprov validate: configuration, host templates, Terraform modules, playbooks")
    xceprov("validate")

    step("xceprov sim up: the simulated controller, cloud (two regions: spot, sim) and hosts")
    xceprov("sim", "up")
    xceprov("sim", "fault", "capacity", SPOT_FLAVOR, str(SPOT_ROOM), quiet=True)
    say(f"the spot region has room for {SPOT_ROOM} hosts today (simulated cloud: capacity of {SPOT_FLAVOR})")

    step(f"xceprov sim submit: work that needs {WORK_HOSTS} cpu hosts for {WORK_DURATION} arrives")
    xceprov("sim", "submit", "--template", "cpu", "--hosts", str(WORK_HOSTS), "--duration", WORK_DURATION)
    row = wait_for(
        "the demand at the controller",
        lambda: (lambda r: r if r.get("wanted", 0) >= WORK_HOSTS else None)(demand_row("cpu")),
        30,
    )
    say(f"demand at the controller: cpu wanted {row['wanted']}, joined {row['joined']}")

    step(f"xceprov plan cpu={WORK_HOSTS}: the burst previewed as a Terraform plan (nothing changes)")
    xceprov("plan", f"cpu={WORK_HOSTS}")

    step("xceprov daemon: leases, demand, burst, bootstrap, joins, reclaim, all by itself")
    daemon.start()
    t_start = time.monotonic()

    def refused() -> list[dict[str, Any]]:
        return [e for e in audit_entries() if e["action"] == "reconcile-op-failed" and e.get("provider") == "spot"]

    wait_for("a create on the preferred region, spot", lambda: by_provider(instances()).get("spot"), 120)
    say(f"spot created its hosts: {by_provider(instances())}")
    [first, *_] = wait_for("the spot region refusing the rest (capacity)", refused, 180)
    failure = first.get("failure") or {}
    say(
        f"spot refused the rest: {failure.get('class', '?')} ({failure.get('matched', '?')})"
        " → fallback to sim by priority"
    )
    running = wait_for(
        f"{WORK_HOSTS} running hosts over both regions",
        lambda: (lambda f: f if len(f) >= WORK_HOSTS else None)(instances()),
        240,
    )
    created = by_provider(running)
    say(f"{len(running)} hosts running: {created} ({time.monotonic() - t_start:.0f}s after the daemon started)")

    if os.geteuid() != 0:
        say("not root: no simulated hosts can boot (network namespaces need root): bootstrap and joins skipped")
        return {"created": created, "partial": True}

    step("bootstrap over SSH, workers join, the work runs")
    wait_for(f"{WORK_HOSTS} workers joined", lambda: demand_row("cpu").get("joined", 0) >= WORK_HOSTS, 300)
    say(f"{WORK_HOSTS} workers joined the controller by themselves (Ansible installed the node manager)")
    wait_for("the work running on the hosts", lambda: demand_row("cpu").get("busy", 0) >= 1, 120)
    say(f"work running: {demand_row('cpu')}")

    step("the work ends; idle hosts are drained and returned")
    wait_for("the hosts going idle", lambda: demand_row("cpu").get("idle", 0) >= 1, 180)
    say(f"hosts idle: {demand_row('cpu')}")
    wait_for("every host returned", lambda: not instances(), 400, every=2.0)
    mine = {i["id"] for i in running}
    gone = [i for i in instances(include_terminated=True) if i["state"] == "terminated" and i["id"] in mine]
    say(f"every host drained and returned ({len(gone)} of the {len(mine)} terminated by the cloud)")
    return {"created": created, "returned": len(gone), "partial": False}


def summary(result: dict[str, Any]) -> None:
    step("summary")
    created = result["created"]
    left = instances()
    print(f"created:  {sum(created.values())} ({', '.join(f'{p} {n}' for p, n in created.items())})")
    if not result["partial"]:
        print(f"returned: {result['returned']}")
    print(f"left:     {len(left)}")
    if left and not result["partial"]:
        raise NotObserved(f"instances left in the cloud: {[i['name'] for i in left]}")


def main() -> int:
    daemon = Daemon()
    code = 1
    try:
        result = story(daemon)
        step("xceprov daemon: SIGTERM (finish or park, release the leases, exit 0)")
        stopped = daemon.stop()
        say(f"daemon exited {stopped}")
        if stopped != 0:
            raise NotObserved(f"the daemon exited {stopped}, not 0 (its log: {DAEMON_LOG})")
        if result["partial"]:
            xceprov("destroy", "--all", "--force", quiet=True)
        summary(result)
        code = 0
    except NotObserved as exc:
        print(f"\ndemo: FAILED: {exc}", file=sys.stderr)
        if DAEMON_LOG.exists():
            print(f"demo: the daemon's last log lines ({DAEMON_LOG}):", file=sys.stderr)
            for line in DAEMON_LOG.read_text(errors="replace").splitlines()[-15:]:
                print(f"  {line}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
    finally:
        daemon.stop()
        if code != 0:
            xceprov("destroy", "--all", "--force", "--max", "100", check=False, quiet=True)
        step("xceprov sim down: nothing left running")
        xceprov("sim", "down", check=False)
    if code == 0:
        print("\ndemo: done. The audit log is .xceprov/audit.log; try: xceprov status, xceprov plan cpu=20 gpu=2")
    return code


if __name__ == "__main__":
    sys.exit(main())
