"""Ends a play between two tasks once the toolkit asks it to stop (``XCEPROV_PLAY_STOP_FILE`` exists).

Loaded by ``ansible-playbook`` (the runner puts this directory on ``ANSIBLE_CALLBACK_PLUGINS``),
never imported by the orchestrator. Ansible calls ``v2_playbook_on_task_start`` in its main
process before it hands the task to any host; with the linear strategy every host has finished
the task before. Raising ``KeyboardInterrupt`` there (not an ``Exception``, which Ansible would
turn into a callback warning) ends the run as a Ctrl-C does: "User interrupted execution", exit
99, and no host is left in the middle of a task. Without the variable (a play run by hand) the
plugin does nothing.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):  # type: ignore[misc]  # Ansible ships no type information
    """Checks for the stop file at every task, handler and play start."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "xceprov_stop"
    CALLBACK_NEEDS_ENABLED = False  # on the plugin path only for the toolkit's runs

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop_file = os.environ.get("XCEPROV_PLAY_STOP_FILE", "")

    def _stop_here(self) -> None:
        if self._stop_file and os.path.exists(self._stop_file):
            raise KeyboardInterrupt("xceprov asked the play to stop")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._stop_here()

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._stop_here()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._stop_here()
