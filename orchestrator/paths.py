"""Where the toolkit's own files are: the package's data ``orchestrator/toolkit-data``.

``terraform/``, ``templates/``, ``ansible/`` (with ``ansible.cfg`` and the collection link in
``ansible-collections/``) and ``contrib/`` are a part of the package: in a checkout
``orchestrator/toolkit-data`` holds links to the repository's directories, in a wheel or an
sdist copies of them (the build follows the links; docs/architecture.md "The toolkit's data").
They are found through the package's resources, never by looking beside the package, so an
installed wheel works from any directory and an editable install reads the checkout's files.
Nothing is written there: an installed package may be read-only to the daemon's user, so
Terraform, Ansible and the simulated world write under ``state_dir``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from orchestrator.errors import FinalError

# A hyphen: no tool takes the data for Python packages (setuptools, mypy, the import linter).
DATA_DIR = "toolkit-data"


def toolkit_root() -> Path:
    """The directory holding ``terraform/``, ``templates/``, ``ansible/`` and ``contrib/``."""
    data = resources.files("orchestrator").joinpath(DATA_DIR)
    # A wheel is unpacked when installed, so its data are plain files; a zipped install would give
    # a Traversable that Terraform and Ansible cannot read.
    if not isinstance(data, Path):
        raise FinalError(f"{data}: the package is not installed as files on disk; install the wheel with pip")
    if not (data / "terraform").is_dir() or not (data / "templates").is_dir():
        raise FinalError(f"{data}: the package's toolkit data are missing (no terraform/ or templates/); reinstall it")
    return data
