"""Orphans: finding cloud resources and facts that disagree, and acting on them carefully.

``scan`` (``OrphanScanner``: one pass, report or act), ``inputs`` (the controller's view and
every shard's cloud views, read once), ``classes`` (a: requested, never joined; b: tagged in the
cloud, no fact; c: ghost fact without a cloud object; d: borrowed licence, not scanned yet),
``ghosts`` (class (c) observations through the host-loss tracker), ``guards`` (every automatic
action: tags, protect tag, lease, both views read, the settle window after a failover, grace,
breaker, rate limit, dry run; each named), ``confirm`` (an administrator's confirmation: who,
``--dry-run``, ``--confirm`` waiving the time guards only), ``limits`` (the persisted rate
limit and the breaker), ``actions``
(through the executor: return, retire, adopt, terminate, report facts) and ``report`` (the
document of ``xceprov orphans --json``, docs/orphans-json.md). Every detection goes to the
audit log with its evidence.

May import: ``orchestrator.reconcile`` (the facts' ledger), ``ops`` (every action goes through
the fenced path), ``workspace``, ``clients``, ``render``, ``configfile``, ``paths``,
``protocol``, ``model`` and ``errors``. Never ``daemon``, ``services``, ``cli`` or ``sim``
(``.importlinter``).
"""
