"""First-boot outcomes of hosts that have not joined, read from their consoles through the provider.

A first-boot host (``bootstrap: {mode: first-boot}``) is reached by nobody: it joins by itself,
and when its boot fails its boot hook prints a result line on the console
(``orchestrator.model.bootresult``). :class:`ConsoleResults` is the one function the first-boot
flow calls with the hosts it still waits for (the daemon's join tracking,
``reconcile/firstboot.py``; a join wait of the executor's callers):
``results(provider, hosts) -> {instance key: FirstBootOutcome}``.

How a console is read is the provider module's (the registry's ``console``,
``orchestrator.model.modules``): a :data:`ConsoleRead` per module name, handed in by the layer
that may build it (the command line binds the simulated cloud's; aws ``GetConsoleOutput`` and
openstack ``os-getConsoleOutput`` are documented, docs/provider-modules.md, not built in). A
module without a reader gives every host "no result yet": the controller's match and the join
deadline still decide.

Bounded, because a console is the host's text relayed by a cloud API:

* only hosts handed in are read (hosts not joined; never a joined one), each at most once per
  ``reread`` seconds (a later call in between gets the outcome last read), at most ``max_hosts``
  per call, those read longest ago first;
* the reads of one call run on ``workers`` threads and the call waits at most ``budget``
  seconds for them: a read not done by then (a slow API) keeps the host's last outcome and is
  tried again at a later call; a read that fails does the same;
* at most the module's ``limit`` of the console's end is parsed (and the parser's own bounds);
* a console the cloud reports for another instance id or another address than the host's is
  an unreadable result, never taken for the host's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Final

from orchestrator.model.bootresult import FirstBootKind, FirstBootOutcome, clean_message, parse_console
from orchestrator.model.config import Config
from orchestrator.model.modules import provider_module
from orchestrator.ops.executor import Created

READ_BUDGET: Final = 10.0  # seconds one call waits for its reads
REREAD: Final = 10.0  # seconds before the same host's console is read again
MAX_HOSTS: Final = 200  # consoles read per call (the others keep their last outcome)
WORKERS: Final = 8


@dataclass(frozen=True)
class Console:
    """An instance's console as the cloud reports it: the id and address it is bound to, the text."""

    instance_id: str
    address: str
    text: str


# (configuration, provider, instance id) -> that instance's console so far; None: none yet.
ConsoleRead = Callable[[Config, str, str], Console | None]
# provider, hosts not joined -> instance key -> outcome (what the first-boot flow calls).
FirstBootOutcomes = Callable[[str, Sequence[Created]], Mapping[str, FirstBootOutcome]]


@dataclass(frozen=True)
class _Seen:
    at: float  # monotonic seconds of the last read tried
    outcome: FirstBootOutcome


class ConsoleResults:
    """The first-boot outcomes of hosts not joined, from their consoles (see the module docstring)."""

    def __init__(
        self,
        config: Callable[[], Config],
        readers: Mapping[str, ConsoleRead],
        *,
        budget: float = READ_BUDGET,
        reread: float = REREAD,
        max_hosts: int = MAX_HOSTS,
        workers: int = WORKERS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._readers = dict(readers)
        self.budget, self.reread, self.max_hosts, self.workers = budget, reread, max_hosts, workers
        self._monotonic = monotonic
        self._seen: dict[str, dict[str, _Seen]] = {}  # provider -> instance key -> last read
        self._lock = threading.Lock()

    def __call__(self, provider: str, hosts: Sequence[Created]) -> dict[str, FirstBootOutcome]:
        """The outcome of each of ``hosts`` (instance key -> outcome); never raises for a console."""
        config = self._config()
        module = config.providers[provider].module if provider in config.providers else ""
        entry = provider_module(module)
        read = self._readers.get(module)
        if entry is None or entry.console is None or read is None:
            note = f"the console of module {module or '?'} is not read by this toolkit"
            return {h.key: FirstBootOutcome(FirstBootKind.NO_RESULT, message=note) for h in hosts}
        limit = entry.console.limit
        with self._lock:
            now = self._monotonic()
            wanted = {h.key for h in hosts}
            seen = {k: s for k, s in self._seen.get(provider, {}).items() if k in wanted}  # forget the others
            due = sorted(
                (h for h in hosts if h.key not in seen or now - seen[h.key].at >= self.reread),
                key=lambda h: seen[h.key].at if h.key in seen else float("-inf"),
            )[: self.max_hosts]
            for host in due:  # tried now, whatever comes of it: the next call reads the others first
                seen[host.key] = _Seen(now, seen[host.key].outcome if host.key in seen else _not_yet(""))
            self._seen[provider] = seen
        read_now = self._read(config, provider, due, read, limit)
        with self._lock:
            seen = self._seen.setdefault(provider, {})
            for key, outcome in read_now.items():
                if key in seen:
                    seen[key] = _Seen(seen[key].at, outcome)
            return {h.key: seen[h.key].outcome if h.key in seen else _not_yet("") for h in hosts}

    def _read(
        self, config: Config, provider: str, hosts: Sequence[Created], read: ConsoleRead, limit: int
    ) -> dict[str, FirstBootOutcome]:
        """The outcome of each host whose read ended within the budget (failed reads left out)."""
        if not hosts:
            return {}
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(hosts))), thread_name_prefix="xce-console")
        try:
            futures: dict[Future[Console | None], Created] = {
                pool.submit(read, config, provider, h.instance_id): h for h in hosts
            }
            done, _late = wait(futures, timeout=self.budget)
        finally:
            # A read stuck in a cloud API is not waited for: its thread ends when the call does.
            pool.shutdown(wait=False, cancel_futures=True)
        out: dict[str, FirstBootOutcome] = {}
        for future in done:
            host = futures[future]
            try:
                console = future.result()
            except Exception:  # any reader failure: tried again at a later call
                continue
            out[host.key] = _outcome(host, console, limit)
        return out


def _not_yet(note: str) -> FirstBootOutcome:
    return FirstBootOutcome(FirstBootKind.NO_RESULT, message=note)


def _outcome(host: Created, console: Console | None, limit: int) -> FirstBootOutcome:
    """The outcome ``console`` shows for ``host``: refused when the cloud bound it to another host."""
    if console is None:
        return _not_yet("")
    if console.instance_id != host.instance_id:
        why = f"the cloud reported the console of instance {console.instance_id[:80]}, not {host.instance_id}"
        return FirstBootOutcome(FirstBootKind.UNREADABLE, message=clean_message(why))
    if host.address and console.address and console.address != host.address:
        why = f"the console was reported for address {console.address[:80]}, not {host.address}"
        return FirstBootOutcome(FirstBootKind.UNREADABLE, message=clean_message(why))
    return parse_console(console.text[-limit:])
