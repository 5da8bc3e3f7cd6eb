"""The controller link (TLS + Cap'n Proto frames, ``link``) and the lease manager (``lease``)."""
