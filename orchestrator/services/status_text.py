"""``xceprov status`` as text: the report's sections, one line per row, printable only.

The report is gathered by ``orchestrator.services.status``; this module only renders it (and the
offline report when no controller answered), so the JSON and the text read the same values.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.model.text import printable
from orchestrator.reconcile.reasons import held_line, reasons_from_json
from orchestrator.services.status import DaemonView, HolderRow, StatusReport


def term_since(started: float) -> str:
    """`` since <UTC time>`` of a term start in unix seconds ("" when the controller did not say)."""
    if started <= 0:
        return ""
    return " since " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))


def render_text(report: StatusReport, providers: list[str]) -> str:
    """The human-readable report."""
    lines = [
        f"controller  {report.link.address}  primary {report.primary}  term {report.term}"
        f"{term_since(report.term_started)}  id {report.controller_id or '-'}",
        "",
        "leases (by the controller's clock)",
    ]
    held = {row.provider: row for row in report.leases}
    for provider in sorted(set(providers) | set(held)):
        row = held.get(provider)
        if row is None or not row.holder:
            grace = f" (grace {row.grace_ends_in:.0f}s)" if row is not None and row.grace_ends_in > 0 else ""
            lines.append(f"  {provider:<16} free{grace}")
        else:
            expires = f"expires in {row.expires_in:.1f}s" if row.expires_in > 0 else "expired"
            lines.append(f"  {provider:<16} holder {row.holder}  epoch {row.epoch}  {expires}")
    lines += ["", *holder_lines(report.store, report.holders, report.holders_from, providers)]
    lines += [
        "",
        f"demand vs supply (snapshot {report.demand_seq})",
        f"  {'template':<16}{'wanted':>8}{'in flight':>11}{'joined':>8}{'idle':>6}{'busy':>6}",
    ]
    if not report.demand:
        lines.append("  (no templates)")
    for d in report.demand:
        lines.append(f"  {d.template:<16}{d.wanted:>8}{d.in_flight:>11}{d.joined:>8}{d.idle:>6}{d.busy:>6}")
    lines += ["", "open ops"]
    if not report.open_ops:
        lines.append("  (none)")
    for op in report.open_ops:
        lines.append(
            f"  {op.provider:<10} {op.op_id}  {op.action:<6} {op.template or '-':<12}"
            f" {op.done}/{op.wanted}  epoch {op.epoch}"
        )
    lines += pool_lines(report)
    lines += offering_lines(report)
    lines += ["", *local_lines(report.daemon, report.breakers, report.unreadable)]
    return "\n".join(printable(line) for line in lines)  # controller and cloud text: one line each


def pool_lines(report: StatusReport) -> list[str]:
    """The warm pools (none shown when the site keeps none and none is left)."""
    if not report.pools:
        return []
    lines = ["", "warm pools", f"  {'template':<16}{'provider':<12}{'stopped':>8}{'target':>8}{'on way':>8}  instances"]
    for row in report.pools:
        names = " ".join(row.instances) or "-"
        lines.append(f"  {row.template:<16}{row.provider:<12}{row.stopped:>8}{row.target:>8}{row.pending:>8}  {names}")
    return lines


def offering_lines(report: StatusReport) -> list[str]:
    """The instances per offering and their cost per hour (none shown when there are none)."""
    if not report.offerings:
        return []
    total = sum(row.cost_per_hour for row in report.offerings)
    lines = ["", f"instances by offering ({total:.2f} per hour)"]
    lines.append(f"  {'template':<16}{'provider':<12}{'offering':<28}{'instances':>10}{'cost/h':>9}")
    for row in report.offerings:
        where = f"  {row.template:<16}{row.provider:<12}{row.offering or '-':<28}"
        lines.append(f"{where}{row.instances:>10}{row.cost_per_hour:>9.2f}")
    return lines


def holder_lines(
    store: dict[str, Any] | None, rows: tuple[HolderRow, ...], source: str, providers: list[str]
) -> list[str]:
    """Which instance holds each provider (from the shared store's members, or the controller)."""
    lines = []
    if store is not None and not store.get("reachable"):
        lines.append(f"shared store  UNREACHABLE: {store.get('error', '')}")
    if source == "store":
        lines.append(f"holders (the shared store's live members: {len((store or {}).get('members', []))})")
    else:
        lines.append("holders (the controller's leases)")
    by_provider = {row.provider: row for row in rows}
    for provider in sorted(set(providers) | set(by_provider)):
        row = by_provider.get(provider)
        if row is None:
            lines.append(f"  {provider:<16} none")
        else:
            lines.append(f"  {provider:<16} {row.label}  instance {row.instance}  epoch {row.epoch}")
    return lines


def local_lines(
    daemon: DaemonView | None, breakers: tuple[dict[str, Any], ...], unreadable: dict[str, str]
) -> list[str]:
    """The daemon's and the breakers' sections (from local files: they need no controller)."""
    daemon_lines = render_daemon(daemon)
    breaker_lines = render_breakers(breakers)
    if "daemon" in unreadable:
        daemon_lines = ["daemon", f"  not readable here: {unreadable['daemon']}"]
    if "breakers" in unreadable:
        breaker_lines = ["breakers", f"  not readable here: {unreadable['breakers']}"]
    return [*daemon_lines, "", *breaker_lines]


def render_offline(error: str, local: dict[str, Any], providers: list[str] | None = None) -> str:
    """The report when no controller answered: what the local files (and the shared store) still say."""
    head = [f"controller  {error}", "  (leases, demand and open ops come from the controller: not shown)", ""]
    store = local.get("store")
    if store is not None and store.get("reachable"):
        head += [*holder_lines(store, local.get("holders", ()), "store", providers or []), ""]
    elif store is not None:
        head += [f"shared store  UNREACHABLE: {store.get('error', '')}", ""]
    return "\n".join(
        printable(line)
        for line in head + local_lines(local.get("daemon"), local.get("breakers", ()), local["unreadable"])
    )


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def render_daemon(view: DaemonView | None) -> list[str]:
    """The daemon's lines: whether it runs, its leases, its reclaim candidates."""
    if view is None:
        return ["daemon", "  no daemon (none has run with this state_dir)"]
    if not view.running:
        why = "stopped" if view.state == "stopped" else f"pid {view.pid} is not running"
        return ["daemon", f"  no daemon ({why}; its last status was written {_ago(view.age)})"]
    trigger = (view.last_pass or {}).get("trigger", "-")
    lines = [
        "daemon",
        f"  {view.state}  pid {view.pid} on {view.host}  instance {view.instance_id}  "
        f"{view.passes} passes, last ({trigger}) written {_ago(view.age)}",
    ]
    if view.stale:
        lines.append("  STALE: no pass ended for several reconcile intervals (a long burst, or a stuck loop)")
    if view.orphans is not None:
        lines.append(orphans_line(view.orphans, time.time()))
    if view.store is not None:
        lines.append(store_line(view.store))
    lines += reason_lines(view)
    lines += ["", f"leases held by the daemon (as of {_ago(view.age)})"]
    for row in view.leases:
        if row.get("held"):
            left = float(row["remaining"])
            lines.append(f"  {row['provider']:<16} held  epoch {row['epoch']}  valid {left:.1f}s more")
        else:
            lines.append(f"  {row['provider']:<16} not held: {row.get('note') or 'not granted yet'}")
    lines += ["", *bootstrap_lines(view)]
    lines += first_boot_lines(view)
    lines += refusal_lines(view.refusals, view.age, time.time())
    lines += notice_lines(view.notices, time.time())
    lines += ["", "reclaim candidates (last pass)"]
    if not view.reclaim_candidates:
        lines.append("  (none)")
    for c in view.reclaim_candidates:
        lines.append(f"  {c.get('provider', '-'):<10} {c.get('host', '-')}  {c.get('key', '-')}  {c.get('reason', '')}")
    return lines


def reason_lines(view: DaemonView) -> list[str]:
    """One line per template with unmet demand, why (``xceprov explain`` shows the history)."""
    found = reasons_from_json(view.reasons)
    if not found:
        return []
    gaps = (view.last_pass or {}).get("gaps") or {}
    lines = ["", "scale-out reasons (last pass; history: xceprov explain)"]
    for template, reasons in sorted(found.items()):
        wanted = int((gaps.get(template) or {}).get("gap", 0))
        lines.append(f"  {printable(held_line(template, wanted, reasons))}")
    return lines


def refusal_lines(rows: tuple[dict[str, Any], ...], age: float, now: float) -> list[str]:
    """What the cloud refused: each held offering (capacity) or provider (quota) with until when,
    how many refusals in a row and the cloud's words; a record whose hold ended shows as probing."""
    lines = ["", f"refusals (as of {_ago(age)})"]
    if not rows:
        return [*lines, "  (none: every offering may be asked)"]
    for row in rows:
        until = row.get("until")
        held = isinstance(until, int | float) and until > now
        what = f"{row.get('provider', '-')}/{row.get('placement') or '*'}"
        when = (
            f"held until {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(until))} ({_in(until - now)})"
            if held and isinstance(until, int | float)
            else "hold ended: asked again"
        )
        failures = int(row.get("failures", 0) or 0)
        lines.append(
            f"  {str(row.get('scope', '-')).upper():<9}{what:<28} {when}  {failures} in a row  {row.get('text', '')}"
        )
    return lines


BOOTSTRAP_COLUMNS = ("waiting", "running", "done", "failed")


def bootstrap_lines(view: DaemonView) -> list[str]:
    """The bootstrap's share of the daemon's created hosts, a line per provider."""
    lines = [f"bootstrap of created hosts (as of {_ago(view.age)})"]
    if view.bootstrap is None:
        return [*lines, "  (not in this status file)"]
    if not view.bootstrap:
        return [*lines, "  (no providers)"]
    for provider, counts in view.bootstrap.items():
        cells = "  ".join(f"{name} {counts.get(name, 0)}" for name in BOOTSTRAP_COLUMNS)
        lines.append(f"  {provider:<16} {cells}")
    return lines


FIRST_BOOT_COLUMNS = ("no-result", "unreadable", "started", "failed", "joined")


def first_boot_lines(view: DaemonView) -> list[str]:
    """First-boot hosts: counts by outcome per provider, each host not joined with its outcome,
    the recent failed first boots (nothing when the daemon has no first-boot host to show)."""
    member = view.first_boot or {}
    counts = member.get("counts") or {}
    failed = [f for f in member.get("failed") or [] if isinstance(f, dict)]
    if not counts and not failed:
        return []
    lines = ["", f"first boot of created hosts (as of {_ago(view.age)})"]
    for provider, row in sorted(counts.items()):
        cells = "  ".join(f"{name} {int(row.get(name, 0))}" for name in FIRST_BOOT_COLUMNS)
        lines.append(f"  {provider:<16} {cells}")
    for host in member.get("hosts") or []:
        lines.append(
            f"  {host.get('host', '-')} ({host.get('provider', '-')}, {host.get('key', '-')}): {host.get('line', '')}"
        )
    if failed:
        lines += ["", "failed first boots (returned; newest last)"]
    for f in failed:
        step, message = f.get("step", "?"), f.get("message", "")
        returned = f"returned by op {f['op']}" if f.get("op") else "return failed: the join deadline returns it"
        lines.append(
            f"  {f.get('host', '-')} ({f.get('provider', '-')}, {f.get('key', '-')}): failed at step {step}"
            + (f": {message}" if message else "")
            + f"; {returned}"
        )
    return lines


def store_line(store: dict[str, Any]) -> str:
    """The daemon's shared store: its share, or since when the store is unreachable."""
    if not store.get("reachable", True):
        since = float(store.get("unreachable_since") or 0.0)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if since else "?"
        return f"  store unreachable since {when}: {store.get('error', '')}; no mutation until it answers"
    dealt = store.get("dealt")
    share = ", ".join(dealt) if dealt else "none"
    count = len(store.get("members", []))
    closed = f"; fence closed: {store['closed']}" if store.get("closed") else ""
    return f"  shared store: {count} live member{'s' if count != 1 else ''}; dealt to this daemon: {share}{closed}"


def notice_lines(notices: tuple[dict[str, Any], ...], now: float) -> list[str]:
    """The hosts acted on for an interruption notice (none: no lines)."""
    if not notices:
        return []
    lines = ["", "interruption notices (hosts closed at the controller, leaving)"]
    for n in notices:
        reclaim = float(n.get("reclaim_at") or 0)
        when = f"reclaimed in {reclaim - now:.0f}s" if reclaim > now else "reclaim time passed"
        lost = "loss recorded" if n.get("lost_at") else when
        lines.append(
            f"  {printable(n.get('host_name') or n.get('instance_id'))}  {printable(n.get('provider'))}/"
            f"{printable(n.get('template'))}  {printable(n.get('instance_id'))}  closed "
            f"{float(n.get('closed_seconds') or 0):.1f}s after the notice ({printable(n.get('host_state'))}); {lost}"
        )
    return lines


def orphans_line(member: dict[str, Any], now: float) -> str:
    """One line for the daemon's orphan scans: the last one's findings and outcomes, the next one."""
    last = member.get("last_scan")
    at = float(member.get("next_scan") or 0.0)
    when = "due now" if at <= now else f"in {_in(at - now)}"
    upcoming = f"next ({member.get('next_reason', 'interval')}) {when}"
    if not isinstance(last, dict):
        return f"  orphans: no scan yet; {upcoming}"
    head = f"  orphans: last scan ({last.get('trigger', '-')}) {_ago(max(0.0, now - float(last.get('finished', now))))}"
    if not last.get("ok"):
        return f"{head} FAILED: {last.get('error', '')}; {upcoming}"
    found = {c: n for c, n in (last.get("findings") or {}).items() if n}
    classes = ", ".join(f"({c}) {n}" for c, n in sorted(found.items()))
    outcomes = ", ".join(f"{o} {n}" for o, n in (last.get("outcomes") or {}).items() if n)
    dry = " (dry run)" if last.get("dry_run") else ""
    total = sum(found.values())
    findings = f"{total} finding{'s' if total > 1 else ''} {classes}: {outcomes}" if found else "no findings"
    return f"{head}{dry}: {findings}{_unread(last)}; {upcoming}"


def _unread(last: dict[str, Any]) -> str:
    """A scan that could not read a view is no all-clear: say which classes it left out."""
    unread = {name: p.get("unread") for name, p in (last.get("providers") or {}).items() if p.get("unread")}
    if not unread:
        return ""
    parts = "; ".join(f"{name} ({', '.join(classes)})" for name, classes in sorted(unread.items()))
    return f"; INCOMPLETE, classes not scanned: {parts}"


def _in(seconds: float) -> str:
    return _ago(seconds).removesuffix(" ago")


def render_breakers(rows: tuple[dict[str, Any], ...]) -> list[str]:
    """The breakers' lines (only templates with a recorded breaker: every other one is closed)."""
    lines = ["breakers"]
    if not rows:
        lines.append("  (all closed)")
    for row in rows:
        reopens = row.get("reopens_at")
        when = f"  half-opens {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(reopens))}" if reopens else ""
        lines.append(
            f"  {row['template']:<16} {row['position']}  {row['failures']}/{row['threshold']} failures{when}"
            + (f"  {row['reason']}" if row.get("reason") else "")
        )
    return lines
