"""The shipped monitoring (contrib/prometheus, contrib/grafana): its queries and the metric names they read.

:func:`promql_metric_names` is a small tokenizer over PromQL: the identifiers of an expression
minus string literals, label matchers (``{...}``), ranges (``[...]``), the label lists of
``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``, functions (an identifier
followed by ``(``) and keywords. What is left are metric names. Enough for the queries we ship;
a query it cannot read makes a test fail loudly, not pass quietly (an unknown name is reported).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "contrib" / "prometheus" / "xceprov-alerts.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "xceprov-alerts.test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "xceprov-dashboard.json"

# Series Prometheus makes itself for every target (not the daemon's to expose).
PROMETHEUS_OWN = frozenset({"up"})

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.$:])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.S)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` reads (a Grafana ``label_values(query, label)`` reads its query's)."""
    if (inner := _LABEL_VALUES.match(expr)) is not None:
        expr = inner.group(1)
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, called = match.groups()
        if called is None and name.lower() not in _KEYWORDS and not re.fullmatch(r"\d+[smhdwy]", name):
            names.add(name)
    return names


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of the shipped alert file."""
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """``(where, expr)`` of every query of the shipped dashboard: panel targets and variables."""
    doc = json.loads(DASHBOARD.read_text())
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            yield f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query


def shipped_queries() -> list[tuple[str, str]]:
    """Every query the shipped monitoring runs: each alert rule's, then the dashboard's."""
    rules = [(f"alert {rule['alert']}", str(rule["expr"])) for rule in alert_rules()]
    return rules + list(dashboard_queries())


def exposed_names(scrape: str) -> set[str]:
    """The metric names a scrape (text format) exposes: every family, with the series names of a
    histogram or summary, even one with no sample yet (a labelled family is announced at once)."""
    names: set[str] = set()
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            elif kind == "summary":
                names |= {f"{name}_sum", f"{name}_count"}
            elif kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def unexposed(scrape: str) -> list[str]:
    """``where: name`` for every metric a shipped query names that the scrape does not expose."""
    exposed = exposed_names(scrape) | PROMETHEUS_OWN
    return [
        f"{where}: {name}" for where, expr in shipped_queries() for name in sorted(promql_metric_names(expr) - exposed)
    ]


def promtool_problems(scrape: str) -> str | None:
    """What ``promtool check metrics`` says is wrong with ``scrape`` ("" when clean); None when
    promtool is not installed."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60)
    return "" if checked.returncode == 0 else checked.stdout + checked.stderr
