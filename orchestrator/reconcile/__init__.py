"""Reconcile: turning demand and supply into ops.

What lives here: ``TEMPLATE=N`` requests → ops for ``xceprov plan`` (``policy``); the exact gap
per template (``gap``, over the facts' ``ledger``); the daemon's scale-out policy (``scaleout``:
breaker, cooldown, providers by priority with fallback, room under ``max_instances`` and the
budgets in ``budget``, granularity); failure classes of a create, by the error's type (``classify``),
provider health and backoff (``health``, ``backoff``, ``retry``); the per-template circuit
breaker (``breaker``); ``max_lifetime`` selection (``lifetime``). Each takes its time as an
argument and returns its evidence. The pass itself: ``loop`` (``Reconciler.run_once()`` → a
``PassReport`` of ``report``, ordered phases isolated by ``phases``, each returning its typed
result of ``results``, on an injected clock) over what ``view`` reads of the controller
(``passctx``: the inputs of one pass); a refused create is closed by ``refused``;
the bootstrap, join-tracking and reclaim phases are ``hostphases``, with per-host bootstrap
records in ``bootstraps`` and the reclaim selection in ``reclaim``; ``statefile`` keeps the
breakers' and bootstraps' files.

May import: ``orchestrator.ops`` (to carry out the ops it decides), ``workspace``, ``clients``,
``render``, ``configfile``, ``paths``, ``protocol``, ``model`` and ``errors``. Never ``orphans``,
``daemon``, ``services``, ``cli`` or ``sim`` (``.importlinter``).
"""
