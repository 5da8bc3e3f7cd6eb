"""``python -m orchestrator.sim.hosts``: the host manager process and its clean-up command.

    serve --state-dir DIR [--lab-name xce] [--lab-subnet 10.213.0.0/16] [--poll-interval 0.5]
          [--ssh-delay 0] [--remove-lab]
    sweep --state-dir DIR [--lab-name xce] [--lab-subnet ...] [--remove-lab]

Both need root. Errors are one line on stderr with the toolkit's exit codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from orchestrator.errors import XceprovError
from orchestrator.sim.hosts.lab import DEFAULT_LAB_NAME, LAB_SPACE, LabConfig, destroy_lab
from orchestrator.sim.hosts.manager import preflight, run_forever, sweep


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sim.hosts")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "sweep"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True, type=Path, help="the simulated world's state directory")
        p.add_argument("--lab-name", default=DEFAULT_LAB_NAME)
        p.add_argument("--lab-subnet", default=str(LAB_SPACE))
        p.add_argument("--remove-lab", action="store_true", help="also remove the lab network at the end")
        if name == "serve":
            p.add_argument("--poll-interval", type=float, default=0.5)
            p.add_argument("--ssh-delay", type=float, default=0.0, help="delay every host's sshd (seconds)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        preflight()
        lab = LabConfig.parse(args.lab_name, args.lab_subnet)
        state_dir = args.state_dir.resolve()
        if args.command == "serve":
            return run_forever(
                state_dir,
                lab,
                poll_interval=args.poll_interval,
                ssh_delay=args.ssh_delay,
                remove_lab=args.remove_lab,
            )
        sweep(state_dir, lab)
        if args.remove_lab:
            destroy_lab(lab)
        return 0
    except XceprovError as exc:
        print(f"xcesim-hosts: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
