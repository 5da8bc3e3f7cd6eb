"""Where a chart goes: its format from the file's suffix, matplotlib loaded only when a chart is
asked for, and the file written whole or not at all.

matplotlib is imported here, lazily, and nowhere at module level: importing it costs a
noticeable part of a second, which every ``xceprov`` command would pay otherwise. The backend is
Agg (no display: a daemon user or a machine over SSH has none). matplotlib keeps a font cache in
``~/.cache/matplotlib`` and warns on stderr when it cannot create it; a user whose home is not
writable (the daemon's) gets a private temporary directory instead (``MPLCONFIGDIR``), removed at
exit.

The output is the same for the same input (a test compares two writes): SVG ids are salted with
a fixed string and carry no date; text stays text in the SVG (``svg.fonttype: none``), so a
chart's labels and figures can be searched and read by a screen reader.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from orchestrator.durable import write_bytes_atomic
from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

# Suffix → matplotlib's format name.
FORMATS: Final = {".png": "png", ".svg": "svg"}
# A chart is made to be shown: readable by others, as any file a plotting tool writes.
CHART_MODE: Final = 0o644
DPI: Final = 100
# Settings that make two writes of one chart the same bytes and keep SVG text as text, whatever a
# matplotlibrc of the user's says; the date epoch is the one ``timeaxis.dates`` counts from.
RC: Final[dict[RcKeyType, Any]] = {
    "svg.hashsalt": "xceprov",
    "svg.fonttype": "none",
    "font.size": 9.0,
    "date.epoch": "1970-01-01T00:00:00",
}


class ChartError(UsageError, ValueError):
    """A chart that cannot be written (a suffix not ``.png``/``.svg``, a path that cannot be
    written): one line, exit 2 (a ``UsageError``); a ``ValueError`` for callers of the library."""


def chart_format(path: Path) -> str:
    """``png`` or ``svg`` from ``path``'s suffix (any case); anything else is a ``ChartError``,
    raised before any work so that a command refuses a bad ``--plot`` first."""
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        kind = f"as {path.suffix}" if path.suffix else "without a suffix"
        raise ChartError(f"{path}: cannot write a chart {kind}: name it .png or .svg")
    return found


def check_chart_path(path: Path) -> str:
    """``chart_format(path)``, and a ``ChartError`` when its directory does not exist or it is
    a directory itself: what a command checks of ``--plot FILE`` before it does any work. A
    missing directory is refused, not created (a mistyped path)."""
    form = chart_format(path)
    if not path.parent.is_dir():
        raise ChartError(f"{path}: cannot write the chart: no directory {path.parent}")
    if path.is_dir():
        raise ChartError(f"{path}: cannot write the chart: it is a directory")
    return form


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return path.is_dir() and os.access(path, os.W_OK)


def _private_config_dir() -> None:
    """Point matplotlib at a private temporary directory when it could not keep its config and
    cache where it looks for them (``$XDG_CONFIG_HOME``/``$XDG_CACHE_HOME`` or ``~/.config``,
    ``~/.cache``), as matplotlib would, but without its warning on stderr."""
    if "matplotlib" in sys.modules or os.environ.get("MPLCONFIGDIR"):
        return
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = None
    wanted = [
        Path(os.environ.get(name) or (home / sub if home else "")) / "matplotlib"
        for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache"))
    ]
    if home is not None and all(_writable_dir(path) for path in wanted):
        return
    private = tempfile.mkdtemp(prefix="xceprov-matplotlib-")
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    os.environ["MPLCONFIGDIR"] = private


def render(path: Path, width: float, height: float, draw: Callable[[Figure], None]) -> None:
    """Draw a figure of ``width`` × ``height`` inches with ``draw`` and write it to ``path`` in
    the format of its suffix (checked first, before matplotlib is even imported).

    Written atomically: a temporary file beside it renamed over it, so a failed write leaves the
    old file (or none), never half a chart (``check_chart_path`` says what is refused).
    """
    form = check_chart_path(path)
    _private_config_dir()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):
        figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        figure.savefig(buffer, format=form, metadata={"Date": None} if form == "svg" else {})
    try:
        write_bytes_atomic(path, buffer.getvalue(), mode=CHART_MODE)
    except OSError as exc:
        raise ChartError(f"{path}: cannot write the chart: {exc.strerror or exc}") from None
