"""The ``xceprov`` command line: one module per verb, no logic in the click layer."""
