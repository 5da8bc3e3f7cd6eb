"""``python -m orchestrator.cli``: the same as the ``xceprov`` console script."""

from orchestrator.cli.main import main

main()
