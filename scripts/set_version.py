#!/usr/bin/env python3
"""Set the toolkit's one version: the package's (pyproject.toml) and the collection's (ansible/galaxy.yml).

``scripts/set_version.py 1.2.0`` writes the version into both files and turns the
``## [Unreleased]`` section of CHANGELOG.md and ansible/CHANGELOG.md into ``## [1.2.0] - <today>``
under a new, empty ``## [Unreleased]``. pyproject.toml is the source of truth;
``tests/unit/test_packaging.py`` fails while galaxy.yml or a changelog disagrees with it.
Then reinstall (``scripts/setup-env.sh``) so that ``xceprov --version`` says it.
"""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Galaxy requires semantic versions; the package takes the same plain X.Y.Z.
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
FILES = {
    # file: (the line holding the version, its replacement with {v})
    "pyproject.toml": (re.compile(r'^version = "[^"]*"$', re.M), 'version = "{v}"'),
    "ansible/galaxy.yml": (re.compile(r"^version: .*$", re.M), "version: {v}"),
}
CHANGELOGS = ("CHANGELOG.md", "ansible/CHANGELOG.md")
UNRELEASED = "## [Unreleased]"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not VERSION.match(argv[0]):
        print(f"set_version: usage: set_version.py X.Y.Z (got {' '.join(argv) or 'nothing'})", file=sys.stderr)
        return 2
    version = argv[0]
    texts = {name: (ROOT / name).read_text(encoding="utf-8") for name in (*FILES, *CHANGELOGS)}
    # Every file is checked before any is written: nothing half-done.
    for name, (pattern, _) in FILES.items():
        if len(pattern.findall(texts[name])) != 1:
            print(f"set_version: {name}: not exactly one version line", file=sys.stderr)
            return 1
    for name in CHANGELOGS:
        if UNRELEASED not in texts[name]:
            print(f"set_version: {name}: no '{UNRELEASED}' section", file=sys.stderr)
            return 1
        if f"## [{version}]" in texts[name]:
            print(f"set_version: {name}: already has a section for {version}", file=sys.stderr)
            return 1
    for name, (pattern, line) in FILES.items():
        texts[name] = pattern.sub(line.format(v=version), texts[name], count=1)
    heading = f"{UNRELEASED}\n\n## [{version}] - {datetime.date.today().isoformat()}"
    for name in CHANGELOGS:
        texts[name] = texts[name].replace(UNRELEASED, heading, 1)
    for name, text in texts.items():
        (ROOT / name).write_text(text, encoding="utf-8")
    print(f"version {version}: {', '.join(texts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
