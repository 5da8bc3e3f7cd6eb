"""Terraform's JSON UI messages → typed values, from lines recorded with Terraform 1.15.5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.clients.terraform import messages
from orchestrator.clients.terraform.messages import ApplyFailed, Diagnostic, ResourceChange, Summary
from orchestrator.errors import StaleState, TerraformError

DATA = Path(__file__).parent / "data"


def stream(name: str) -> list[dict[str, object]]:
    return messages.parse_lines((DATA / name).read_text())


def test_parse_lines_skips_non_json() -> None:
    text = 'not json\n{"type": "version"}\n\n{broken\n["a list"]\n{"type": "log"}\n'
    assert messages.parse_lines(text) == [{"type": "version"}, {"type": "log"}]


def test_refresh_only_drift_delete_and_update() -> None:
    result = messages.plan_result(stream("refresh_only_drift.jsonl"), exit_code=2)
    assert result.changes == ()
    assert result.drift == (
        ResourceChange('xcesim_instance.this["op1-0"]', "", "xcesim_instance", "this", "op1-0", "delete"),
        ResourceChange('xcesim_instance.this["op1-1"]', "", "xcesim_instance", "this", "op1-1", "update"),
    )
    assert result.has_changes
    assert result.summary == Summary(0, 0, 0)


def test_plan_after_drift_has_drift_and_changes() -> None:
    result = messages.plan_result(stream("plan_after_drift.jsonl"))
    assert {(c.key, c.action) for c in result.drift} == {("op1-0", "delete"), ("op1-1", "update")}
    assert {(c.key, c.action) for c in result.changes} == {("op1-0", "create"), ("op1-1", "update")}
    assert result.summary == Summary(add=1, change=1, remove=0)
    assert result.has_changes  # no exit code given: any change counts


def test_plan_in_module_with_replace_and_delete() -> None:
    result = messages.plan_result(stream("plan_module_replace_delete.jsonl"), exit_code=2, plan_file="p2")
    by_addr = {c.addr: c for c in result.changes}
    replaced = by_addr['module.hosts.terraform_data.host["op7-0"]']
    assert replaced == ResourceChange(
        addr='module.hosts.terraform_data.host["op7-0"]',
        module="module.hosts",
        type="terraform_data",
        name="host",
        key="op7-0",
        action="replace",
    )
    assert by_addr["terraform_data.gone[0]"].action == "delete"
    assert by_addr["terraform_data.gone[0]"].key == 0
    assert by_addr["terraform_data.fail[0]"].action == "create"
    assert result.summary == Summary(add=3, change=0, remove=3)
    assert result.plan_file == "p2"


def test_warning_is_kept_and_does_not_raise() -> None:
    result = messages.plan_result(stream("plan_warning_no_changes.jsonl"), exit_code=0)
    assert not result.has_changes
    (warning,) = result.diagnostics
    assert warning.severity == "warning"
    assert warning.summary == "Value for undeclared variable"
    assert str(warning).startswith("Warning: Value for undeclared variable: The root module")
    assert "\n" not in str(warning)


def test_unsupported_argument_names_file_and_line() -> None:
    with pytest.raises(TerraformError) as err:
        messages.plan_result(stream("plan_unsupported_argument.jsonl"), exit_code=1)
    assert str(err.value) == ('main.tf:3: Error: Unsupported argument: An argument named "foo" is not expected here.')
    assert err.value.exit_code == 4


def test_syntax_error_one_line_per_diagnostic() -> None:
    diags = messages.diagnostics(stream("init_syntax_error.jsonl"))
    with pytest.raises(TerraformError) as err:
        messages.raise_for_errors(diags)
    lines = str(err.value).splitlines()
    assert len(lines) == len(diags) == 2
    assert lines[1] == (
        "main.tf:2: Error: Invalid expression: "
        "Expected the start of an expression, but found an invalid expression token."
    )
    assert lines[0].startswith("Error: Terraform encountered problems during initialisation")


def test_diagnostic_range_is_parsed() -> None:
    (diag,) = messages.diagnostics(stream("plan_unsupported_argument.jsonl"))
    assert diag == Diagnostic(
        "error", "Unsupported argument", 'An argument named "foo" is not expected here.', "main.tf", 3
    )


def test_stale_saved_plan_is_stale_state() -> None:
    with pytest.raises(StaleState) as err:
        messages.apply_result(stream("apply_stale_plan.jsonl"))
    assert str(err.value).startswith("saved plan is stale: The given plan file can no longer be applied")
    assert err.value.exit_code == 7


def test_apply_ok() -> None:
    result = messages.apply_result(stream("apply_ok.jsonl"))
    assert result.failed == ()
    assert result.summary.add == len([c for c in result.changes if c.action == "create"])
    assert all(isinstance(c, ResourceChange) for c in result.changes)


def test_apply_failure_keeps_the_partial_result() -> None:
    with pytest.raises(ApplyFailed) as err:
        messages.apply_result(stream("apply_provisioner_error.jsonl"))
    assert isinstance(err.value, TerraformError)
    assert str(err.value).startswith("main.tf:13: Error: local-exec provisioner error: Error running command")
    partial = err.value.result
    assert [c.addr for c in partial.failed] == ["terraform_data.fail[0]"]
    assert {c.action for c in partial.changes} >= {"create", "delete"}


def test_validate_document() -> None:
    doc = json.loads((DATA / "validate_unsupported_argument.json").read_text())
    (diag,) = messages.validate_diagnostics(doc)
    assert (diag.filename, diag.line, diag.severity) == ("main.tf", 3, "error")


def test_human_diagnostics_from_fmt() -> None:
    (diag,) = messages.human_diagnostics((DATA / "fmt_syntax_error.txt").read_text())
    assert str(diag) == (
        "main.tf:2: Error: Invalid expression: "
        "Expected the start of an expression, but found an invalid expression token."
    )


def test_human_diagnostics_with_box_drawing() -> None:
    text = (
        "╷\n│ Error: No file or directory at nope\n│ \n│ \n╵\n"
        "╷\n│ Warning: Deprecated\n│ \n│   on a.tf line 4:\n│    4:   x = 1\n│ \n│ Use y.\n╵\n"
    )
    assert messages.human_diagnostics(text) == (
        Diagnostic("error", "No file or directory at nope", "", None, None),
        Diagnostic("warning", "Deprecated", "Use y.", "a.tf", 4),
    )


@pytest.mark.parametrize(
    ("raw", "ours"),
    [("noop", "no-op"), ("read", "read"), ("move", "no-op"), ("forget", "no-op"), ("weird", "no-op")],
)
def test_action_mapping(raw: str, ours: str) -> None:
    change = {
        "resource": {
            "addr": "data.xcesim_instances.all",
            "module": "",
            "resource_type": "xcesim_instances",
            "resource_name": "all",
        },
        "action": raw,
    }
    parsed = messages.resource_change(change)
    assert parsed.action == ours
    assert parsed.key is None


def test_failed_command_without_diagnostics_uses_stderr() -> None:
    with pytest.raises(TerraformError) as err:
        messages.raise_for_errors((), fallback="panic: something\n\ngoroutine 1 [running]:\n")
    assert str(err.value).startswith("terraform failed: ")
    assert "\n" not in str(err.value)
