"""The shipped monitoring files, read without a daemon or promtool: every alert tested both ways,
every metric a query names documented, the dashboard well formed, the tokenizer the live test uses."""

from __future__ import annotations

import json
import re

import yaml

from tests.monitoring_helpers import (
    DASHBOARD,
    PROMETHEUS_OWN,
    ROOT,
    RULE_TESTS,
    alert_rules,
    promql_metric_names,
    shipped_queries,
)


def test_the_tokenizer_keeps_metric_names_only() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, provider) (rate(xceprov_op_duration_seconds_bucket{job="$job", '
        'provider=~"a|b"}[$__rate_interval]))) > bool 1e3 unless on (job) max_over_time(up[5m] offset 1h)'
    )
    assert promql_metric_names(expr) == {"xceprov_op_duration_seconds_bucket", "up"}
    assert promql_metric_names('label_values(xceprov_lease_valid{job="$job"}, provider)') == {"xceprov_lease_valid"}
    assert promql_metric_names("sum without (template) (a_b) >= ignoring (cluster) 0.9 * c:d") == {"a_b", "c:d"}


def test_every_alert_fires_in_a_promtool_test_and_stays_silent_in_another() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == ["xceprov-alerts.yml"]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), "two rules share a name"
    assert sorted(set(names) - fires) == [], "alerts no test makes fire"
    assert sorted(set(names) - silent) == [], "alerts no test expects silent"
    assert sorted((fires | silent) - set(names)) == [], "tests of alerts the rules do not have"


def test_every_metric_a_shipped_query_names_is_documented() -> None:
    documented = set(re.findall(r"^\| `([a-z_:]+)` \|", (ROOT / "docs" / "daemon.md").read_text(), re.M))
    documented |= {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"}
    documented |= {"process_max_fds", "process_start_time_seconds"}  # prometheus-client's process collector
    missing = []
    for where, expr in shipped_queries():
        for name in promql_metric_names(expr) - PROMETHEUS_OWN:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in documented and base not in documented:
                missing.append(f"{where}: {name}")
    assert missing == []


def test_the_dashboard_reads_the_chosen_prometheus_and_daemon() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "xceprov"
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"{panel['title']}: no query"
        for target in panel["targets"]:
            # Every daemon series is narrowed to the chosen job and instances.
            assert 'job="$job"' in target["expr"], f"{panel['title']}: {target['expr']}"
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert variables == {"datasource", "job", "instance", "provider"}
