"""A replay's model world drawn from a Standard Workload Format trace (``replay/swf.py``,
docs/replay.md "From a workload trace (SWF)"), and the shipped trace made by its model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from orchestrator.configfile import parse_config
from orchestrator.model.config import Config
from orchestrator.paths import toolkit_root
from orchestrator.replay.model import Job, Latencies
from orchestrator.replay.swf import EPOCH, MAX_LINE, SwfError, SwfMapping, map_swf, model_of_swf, read_swf

ROOT = Path(__file__).resolve().parents[3]
SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim, max_instances: 10}
  other: {module: xcesim, max_instances: 4}
templates:
  small:
    xce: {slots: 4}
    providers:
      sim: {flavor: c4, image: baked, cost_per_hour: 1, max_instances: 2}
  big:
    xce: {slots: 16}
    providers:
      sim: {flavor: c16, image: baked, cost_per_hour: 4}
      other: {flavor: c16, image: baked, cost_per_hour: 4}
"""


def site() -> Config:
    return parse_config(SITE, "site.yaml", Path("/")).config


def line(number: int, submit: float, run: float, allocated: int, requested: int = -1, queue: int = 1) -> str:
    fields = [number, submit, 5, run, allocated, -1, -1, requested, -1, -1, 1, 3, -1, -1, queue, 1, -1, -1]
    return " ".join(str(f) for f in fields)


def test_a_trace_is_read_in_submit_order_with_its_header_and_skipped_jobs_counted() -> None:
    trace = read_swf(
        [
            "; Version: 2.2",
            ";   UnixStartTime: 1000000",
            "; a free comment",
            "",
            line(2, 50, 100, 4),
            line(1, 10, 60.5, -1, 8),  # allocated unknown: requested
            line(3, 60, 0, 4),  # ran no time: skipped
            line(4, 70, 100, -1, -1),  # no processors: skipped
            line(5, 80, -1, 2),  # run time unknown: skipped
        ],
        "t.swf",
    )
    assert [(j.number, j.submit, j.run, j.processors) for j in trace.jobs] == [(1, 10, 60.5, 8), (2, 50, 100, 4)]
    assert trace.skipped == 3 and trace.unix_start == 1_000_000 and trace.header["Version"] == "2.2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 2 3", "t.swf: line 2: 3 fields; an SWF job line has 18"),
        (line(1, 10, 100, 4).replace(" 100 ", " ten ", 1), "t.swf: line 2: field 4 (run time) 'ten' is not a number"),
        (line(1, 10, 100, 4).replace(" 100 ", " nan ", 1), "t.swf: line 2: field 4 (run time) 'nan' is not a finite"),
        (line(1, -5, 100, 4), "t.swf: line 2: field 2 (submit time) '-5' is not a time"),
        (line(1, 10, 100, 4).replace(" 4 ", " 4.5 ", 1), "t.swf: line 2: field 5 (allocated processors) '4.5' is not"),
        ("; UnixStartTime: soon", "t.swf: line 2: UnixStartTime 'soon' is not a number"),
        ("; UnixStartTime: -3", "t.swf: line 2: UnixStartTime '-3' is not a time"),
        ("1" * (MAX_LINE + 1), f"t.swf: line 2: longer than {MAX_LINE} characters"),
    ],
)
def test_a_bad_line_is_refused_naming_the_line_and_the_field(text: str, message: str) -> None:
    with pytest.raises(SwfError) as caught:
        read_swf([line(1, 0, 10, 1), text], "t.swf")
    assert str(caught.value).startswith(message)


def test_too_many_jobs_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.replay.swf.MAX_JOBS", 2)
    with pytest.raises(SwfError, match="line 3: more than 2 jobs"):
        read_swf([line(n, n, 10, 1) for n in range(1, 4)], "t.swf")


def test_times_start_at_the_header_s_start_time_else_the_fixed_epoch() -> None:
    config = site()
    lines = [line(1, 30, 100, 4), line(2, 90, 50, 4)]
    with_start = model_of_swf(read_swf(["; UnixStartTime: 1700000000", *lines], "t"), config)
    # The last job ends at 90 + 50; the model runs an hour past it (SETTLE).
    assert (with_start.start, with_start.end) == (1_700_000_030, 1_700_000_140 + 3600)
    assert [j.submit for j in with_start.jobs] == [1_700_000_030, 1_700_000_090]
    without = model_of_swf(read_swf(lines, "t"), config)
    assert without.start == EPOCH + 30 and without.source == "swf:t"
    given = model_of_swf(read_swf(lines, "t"), config, SwfMapping(epoch=5000))
    assert given.start == 5030
    assert without.refusals == () and without.losses == () and without.latencies == Latencies()
    drawn = Latencies(launch=(1.0,), join=(9.0,))
    assert model_of_swf(read_swf(lines, "t"), config, latencies=drawn).latencies == drawn


def test_the_mapping_takes_the_first_template_whose_hosts_hold_the_job() -> None:
    config = site()
    trace = read_swf(
        [
            line(1, 0, 10, 3),  # small: 1 host of 4 slots
            line(2, 1, 10, 8),  # small: 2 hosts (its max_instances)
            line(3, 2, 10, 9),  # 3 hosts of small is more than 2: big, 1 host of 16
            line(4, 3, 10, 16 * 14),  # 14 hosts of big: 10 on sim + 4 on other
            line(5, 4, 10, 16 * 14 + 1),  # 15 hosts of big: no template holds it
        ],
        "t",
    )
    mapped = map_swf(trace, config, SwfMapping(epoch=0))
    assert mapped.jobs == (
        Job(0, "small", 1, 10),
        Job(1, "small", 2, 10),
        Job(2, "big", 1, 10),
        Job(3, "big", 14, 10),
    )
    assert mapped.dropped == 1


def test_the_mapping_by_template_partition_or_queue() -> None:
    config = site()
    trace = read_swf([line(1, 0, 10, 4, queue=1), line(2, 1, 10, 4, queue=2), line(3, 2, 10, 12, queue=1)], "t")
    by_queue = map_swf(trace, config, SwfMapping(queues={2: "big"}, epoch=0))
    assert [(j.template, j.hosts) for j in by_queue.jobs] == [("small", 1), ("big", 1), ("big", 1)]
    # Every job of partition 1 on small: the 12-processor job needs 3 hosts, more than small has.
    by_partition = map_swf(trace, config, SwfMapping(partitions={1: "small"}, queues={2: "big"}, epoch=0))
    assert [(j.template, j.hosts) for j in by_partition.jobs] == [("small", 1), ("small", 1)]
    assert by_partition.dropped == 1
    every = map_swf(trace, config, SwfMapping(template="big", epoch=0))
    assert {j.template for j in every.jobs} == {"big"}
    with pytest.raises(SwfError, match="SWF mapping: queue 2: 'gpu' is not a template of the configuration"):
        map_swf(trace, config, SwfMapping(queues={2: "gpu"}))


def test_a_trace_with_no_job_that_fits_is_refused() -> None:
    with pytest.raises(SwfError, match="t: no job of the trace fits"):
        model_of_swf(read_swf([line(1, 0, 10, 10_000)], "t"), site())


def _make_trace() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_trace", ROOT / "scripts" / "make_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_trace_is_what_its_documented_model_makes() -> None:
    make_trace = _make_trace()
    shipped = toolkit_root() / "traces" / "model-day.swf"
    text = shipped.read_text()
    assert text == make_trace.trace()
    assert len(text) < 100_000
    trace = read_swf(text.splitlines(), "model-day.swf")
    assert 200 <= len(trace.jobs) <= 500 and trace.skipped == 0
    assert trace.unix_start == make_trace.START and f"seed {make_trace.SEED}" in text
    assert {j.processors for j in trace.jobs} <= {1, 2, 4, 8, 16}
    assert all(j.submit < 86400 for j in trace.jobs)
    # A daily cycle: more work submitted in the afternoon than in the small hours.
    afternoon = sum(1 for j in trace.jobs if 12 * 3600 <= j.submit < 16 * 3600)
    night = sum(1 for j in trace.jobs if 0 <= j.submit < 4 * 3600)
    assert afternoon > 2 * night
    assert make_trace.main(["--check"]) == 0


def test_the_trace_script_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    make_trace = _make_trace()
    stale = tmp_path / "t.swf"
    stale.write_text("; Version: 2.2\n")
    assert make_trace.main(["--check", "-o", str(stale)]) == 1
    assert make_trace.main(["-o", str(stale)]) == 0
    assert make_trace.main(["--check", "-o", str(stale)]) == 0
