"""The console result line of a first boot, parsed as untrusted input: never an exception, bounded.

What a user would notice: the outcome ``xceprov status`` shows for a host (failed at which step,
with which message), and that a hostile or broken console never crashes the daemon nor prints
control characters on the operator's terminal.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.model.bootresult import (
    CONSOLE_LIMIT,
    LINE_LIMIT,
    MARKER,
    MESSAGE_LIMIT,
    FirstBootKind,
    FirstBootOutcome,
    parse_console,
)


def line(**doc: object) -> str:
    return MARKER + json.dumps(doc)


def test_a_failed_line_gives_the_step_and_the_message() -> None:
    console = "boot...\n" + line(v=1, outcome="failed", step="join", message="the controller refused the token") + "\n"
    outcome = parse_console(console)
    assert outcome == FirstBootOutcome(FirstBootKind.FAILED, "join", "the controller refused the token")
    assert outcome.line() == "failed at step join: the controller refused the token"
    assert outcome.bootstrap_outcome() == "failed: first boot failed at step join: the controller refused the token"


def test_a_started_line_is_started_not_joined() -> None:
    outcome = parse_console("x\r\n" + line(v=1, outcome="started", step="start") + "\r\n")
    assert outcome.kind == FirstBootKind.STARTED
    assert outcome.line() == "started, not joined"
    assert outcome.bootstrap_outcome().startswith("failed: first boot not joined by its join_deadline")


def test_no_marker_is_no_result_yet() -> None:
    assert parse_console("").kind == FirstBootKind.NO_RESULT
    assert parse_console("-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 AAAA\n").kind == FirstBootKind.NO_RESULT


def test_the_last_well_formed_line_wins() -> None:
    console = "\n".join(
        [
            line(v=1, outcome="failed", step="config", message="first try"),
            line(v=1, outcome="started"),
            MARKER + "{not json",  # after the last good line: the good line still wins
        ]
    )
    assert parse_console(console).kind == FirstBootKind.STARTED


def test_a_marker_after_a_prefix_is_read() -> None:
    console = "[   12.5] cloud-init[812]: " + line(v=1, outcome="failed", step="start", message="exit 3")
    assert parse_console(console) == FirstBootOutcome(FirstBootKind.FAILED, "start", "exit 3")


def test_unknown_fields_are_ignored() -> None:
    outcome = parse_console(line(v=1, outcome="failed", step="config", message="m", extra={"a": [1, 2]}, at=3))
    assert outcome == FirstBootOutcome(FirstBootKind.FAILED, "config", "m")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ("[" * 5000 + "]" * 5000, "longer than"),
        ("[" * 1500 + "]" * 1500, "not JSON"),  # within the size limit, nested past the recursion limit
        ('{"v": 2, "outcome": "failed", "step": "join"}', "version 2"),
        ('{"v": true, "outcome": "failed", "step": "join"}', "version true"),
        ('{"v": "1", "outcome": "failed", "step": "join"}', 'version "1"'),
        ('{"outcome": "failed", "step": "join"}', "version null"),
        ('{"v": 1, "outcome": "exploded", "step": "join"}', 'outcome "exploded"'),
        ('{"v": 1, "outcome": "failed", "step": "reboot"}', 'step "reboot"'),
        ('{"v": 1, "outcome": "failed"}', "step"),
        ('{"v": 1, "outcome": "failed", "step": "join", "message": {"a": 1}}', "message is not a string"),
        ('{"v": 1, "outcome": ["failed"], "step": "join"}', "outcome list"),
        ('{"v": NaN, "outcome": "failed", "step": "join"}', "version NaN"),
        ("\x00\x1b[2J", "not JSON"),
    ],
)
def test_malformed_lines_are_an_unreadable_result_never_an_exception(payload: str, why: str) -> None:
    outcome = parse_console("boot\n" + MARKER + payload + "\n")
    assert outcome.kind == FirstBootKind.UNREADABLE, outcome
    assert why in outcome.message
    assert outcome.line().startswith("unreadable result: ")
    assert outcome.message.isprintable()


def test_an_over_long_line_is_refused_by_its_size() -> None:
    message = "x" * LINE_LIMIT
    outcome = parse_console(line(v=1, outcome="failed", step="join", message=message))
    assert outcome.kind == FirstBootKind.UNREADABLE and f"longer than {LINE_LIMIT}" in outcome.message


def test_control_characters_are_dropped_and_a_long_message_cut() -> None:
    hostile = "\x1b[31mred\x1b[0m\u202etxt.exe\u2028second line\x07" + "y" * 1000
    outcome = parse_console(line(v=1, outcome="failed", step="join", message=hostile))
    assert outcome.kind == FirstBootKind.FAILED
    assert outcome.message.isprintable()
    assert "\x1b" not in outcome.message and "\u202e" not in outcome.message and "\u2028" not in outcome.message
    assert outcome.message.startswith("[31mred[0mtxt.exesecond line")
    assert len(outcome.message) == MESSAGE_LIMIT and outcome.message.endswith("...")


def test_only_the_end_of_a_huge_console_is_read() -> None:
    early = line(v=1, outcome="failed", step="join", message="early") + "\n"
    noise = "n" * (CONSOLE_LIMIT + 10) + "\n"
    assert parse_console(early + noise).kind == FirstBootKind.NO_RESULT  # out of the window
    late = line(v=1, outcome="failed", step="start", message="late")
    assert parse_console(early + noise + late) == FirstBootOutcome(FirstBootKind.FAILED, "start", "late")


def test_lone_surrogates_and_bad_text_do_not_raise() -> None:
    outcome = parse_console(MARKER + '{"v":1,"outcome":"failed","step":"join","message":"\\ud800x"}')
    assert outcome.kind == FirstBootKind.FAILED and outcome.message == "x"
    assert parse_console("\ud800" + MARKER + "\udfff").kind == FirstBootKind.UNREADABLE


def test_json_ready() -> None:
    outcome = FirstBootOutcome(FirstBootKind.FAILED, "join", "m")
    assert outcome.to_json() == {"outcome": "failed", "step": "join", "message": "m"}
