"""Per-task timings of a play, for ``bench/bench_bootstrap.py --profile`` (not shipped, not the toolkit's).

Ansible loads it when this directory is on ``ANSIBLE_CALLBACK_PLUGINS`` and
``XCEPROV_BENCH_TIMING`` names the JSON file to write at the end of the run: for each task (in
play order) its name, when the strategy started it, and when each host's result came back.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):  # type: ignore[misc]  # Ansible ships no type information
    """Records task starts and host results with ``time.monotonic()``."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timing"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._out = os.environ.get("XCEPROV_BENCH_TIMING", "")
        self._tasks: list[dict[str, Any]] = []
        self._by_uuid: dict[str, dict[str, Any]] = {}
        self._begin = time.monotonic()

    def _start(self, task: Any, kind: str) -> None:
        entry = {"name": f"{kind}{task.get_name()}", "start": time.monotonic() - self._begin, "hosts": {}}
        self._tasks.append(entry)
        self._by_uuid[task._uuid] = entry

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._start(task, "")

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._start(task, "handler: ")

    def _done(self, result: Any, outcome: str) -> None:
        entry = self._by_uuid.get(result._task._uuid)
        if entry is not None:
            entry["hosts"][result._host.get_name()] = [time.monotonic() - self._begin, outcome]

    def v2_runner_on_ok(self, result: Any) -> None:
        self._done(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._done(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._done(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._done(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if self._out:
            with open(self._out, "w") as fh:
                json.dump({"total": time.monotonic() - self._begin, "tasks": self._tasks}, fh)
