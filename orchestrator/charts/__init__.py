"""Charts for people who would rather look than read: ``xceprov replay --plot`` (runs side by
side, ``runs.py``) and ``xceprov cost --plot`` (spend over time, ``spend.py``), PNG or SVG by the
file's suffix (``output.py``). matplotlib is imported only when a chart is written.

A layer of its own under ``cli`` (``.importlinter``): it draws the replay's figures
(``orchestrator.replay.figures``) and the ledger's items (``orchestrator.model.costs``), and
only the command line draws.
"""

from orchestrator.charts.output import ChartError, chart_format, check_chart_path
from orchestrator.charts.runs import write_run_chart
from orchestrator.charts.spend import write_cost_chart

__all__ = ["ChartError", "chart_format", "check_chart_path", "write_cost_chart", "write_run_chart"]
