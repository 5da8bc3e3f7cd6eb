"""Two ``xceprov daemon`` processes, one simulated world with four providers, one real PostgreSQL:
the leases split two and two by the rule of docs/daemon.md, ``xceprov status`` names both
holders with their epochs, a demand both see is met once (not once per daemon), and a clean stop
of one hands its providers to the other.

The setup is ``tests/scaleout_world.py`` (shared with the takeover, outage and epoch tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scaleout_world import PROVIDERS, Member, scaleout_world

from orchestrator.daemon.share import deal

pytestmark = pytest.mark.integration


def audit(member: Member) -> list[dict[str, Any]]:
    path = member.state / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_two_daemons_split_four_providers_and_status_names_both_holders(tmp_path: Path) -> None:
    with scaleout_world(tmp_path) as w:
        a, b = w.start("a"), w.start("b")
        split = w.wait_split(a, b)
        # Two each, and the very two the rule deals by the order of their instances.
        w.wait_for("both daemons' instances in their status", lambda: bool(a.instance() and b.instance()))
        ia, ib = a.instance(), b.instance()
        owner = deal({ia: PROVIDERS, ib: PROVIDERS})
        assert split == {"a": {p for p in PROVIDERS if owner[p] == ia}, "b": {p for p in PROVIDERS if owner[p] == ib}}
        assert len(split["a"]) == len(split["b"]) == 2
        # A provider dealt to the other is never asked for: its note says why.
        notes = {r["provider"]: r["note"] for r in a.status()["leases"] if not r["held"]}
        assert notes == dict.fromkeys(split["b"], "not asked for: dealt to another instance")

        # xceprov status (with either configuration) names both holders from the shared store.
        def holders_agree() -> bool:
            done = a.xceprov("status", "--json")
            assert done.returncode == 0, done.stderr
            doc = json.loads(done.stdout)
            epochs = {**a.held(), **b.held()}
            shown = {h["provider"]: (h["instance"], h["epoch"]) for h in doc["holders"]}
            return doc["holders_from"] == "store" and shown == {p: (owner[p], epochs.get(p)) for p in PROVIDERS}

        w.wait_for("xceprov status naming both holders with their epochs", holders_agree)
        text = b.xceprov("status")
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        at = lines.index("holders (the shared store's live members: 2)")
        shown = {line.split()[0]: line for line in lines[at + 1 : at + 1 + len(PROVIDERS)]}
        for p in PROVIDERS:
            assert f"instance {owner[p]}  epoch " in shown[p], shown
        # The controller agrees: its lease of each provider is held by the same process instance.
        for p in PROVIDERS:
            assert any(line.strip().startswith(p) and f"/{owner[p]}  epoch" in line for line in lines), lines

        # A demand of four hosts reaches both: one of them decides at a time (the shared store's
        # scale-out lock), so the hosts are made once, not once per daemon.
        def idle(m: Member) -> bool:  # its start's orphan scan over: its loop answers a push at once
            return bool((m.status().get("orphans") or {}).get("last_scan"))

        w.wait_for("both daemons past their first orphan scan", lambda: idle(a) and idle(b))
        w.world.ok("sim", "submit", "--template", "cpu", "--hosts", "4", "--duration", "600s")
        w.wait_for("the four hosts in the cloud", lambda: len(w.world.alive()) >= 4)

        def settled(m: Member) -> bool:
            last = m.status().get("last_pass") or {}
            return (last.get("gaps") or {}).get("cpu", {}).get("gap") == 0 and not m.status().get("open_ops")

        w.wait_for("both daemons seeing no gap left", lambda: settled(a) and settled(b))
        made = [e for m in (a, b) for e in audit(m) if e["action"] == "op-created"]
        assert len(w.world.alive()) == 4 and sum(len(e["instances"]) for e in made) == 4, made

        # A clean stop of b: its leases released, its member row gone: a takes all four.
        assert b.terminate() == 0, b.log()[-3000:]
        w.wait_for("a holding all four providers", lambda: set(a.held()) == set(PROVIDERS))
        assert (a.status()["store"]["dealt"], len(a.status()["store"]["members"])) == (list(PROVIDERS), 1)
