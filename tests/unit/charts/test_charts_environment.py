"""Where charts are written from: matplotlib only when a chart is asked for, no display, and a
user whose home cannot be written (the daemon's) gets a chart and no warning (docs/replay.md,
"Charts"). Each case runs in a fresh interpreter: matplotlib is set up once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CHART = """
import os, sys
from pathlib import Path
from orchestrator.charts import write_run_chart
from orchestrator.replay.figures import RunFigures, Sample
samples = [Sample(1_767_225_600.0 + 60 * i, i % 3, i % 2, 0.1 * i) for i in range(10)]
write_run_chart([RunFigures("recorded", 0, 600, 1.0, 1.0, 1.0, 1, 1, 0, {}, samples)], Path(sys.argv[1]))
import matplotlib
print(matplotlib.get_backend(), os.environ.get("MPLCONFIGDIR", ""))
"""


def python(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPL", "XDG_", "DISPLAY"))}
    env.pop("HOME", None)
    return {**env, **extra}


def test_the_command_line_does_not_import_matplotlib() -> None:
    done = python(
        "import sys, orchestrator.cli.main, orchestrator.charts; print('matplotlib' in sys.modules)", env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("where", ["HOME", "XDG_CACHE_HOME"])
def test_a_home_that_cannot_be_written_still_gets_a_chart_and_no_warning(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")  # a directory below a regular file cannot be made, even by root
    if where == "HOME":
        env = clean_env(HOME=str(blocker))
    else:  # the config directory can be made, the cache directory cannot
        env = clean_env(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(blocker / "cache"))
    done = python(CHART, str(tmp_path / "chart.png"), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # matplotlib's "created a temporary cache directory" is not printed
    backend, private = done.stdout.split()
    assert backend.lower() == "agg"
    assert Path(private).name.startswith("xceprov-matplotlib-") and not Path(private).exists()  # removed at exit
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def test_a_writable_home_keeps_matplotlibs_cache_there(tmp_path: Path) -> None:
    done = python(CHART, str(tmp_path / "chart.svg"), env=clean_env(HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.lower().split() == ["agg"] and (tmp_path / "home" / ".cache" / "matplotlib").is_dir()
