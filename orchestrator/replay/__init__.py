"""What-if replay (docs/replay.md): the real reconcile pass on a virtual clock against a model world.

``xceprov replay`` runs the daemon's own :class:`~orchestrator.reconcile.loop.Reconciler` and
the real :class:`~orchestrator.ops.executor.Executor` (policy, scale-out rounds, refusal memory,
reclaim, drains, returns, host loss: not a second implementation) with three stand-ins for the
outside world, each modelled from a recording or a workload trace:

* :mod:`.engine` — a Terraform engine over :mod:`.cloud` (the model cloud: instances made at the
  clock's time, capacity and quota refusals in the windows the recording saw, spot reclaims);
* :mod:`.controller` — the controller as the pass reads it (demand, hosts, facts) with the
  simulated controller's own workload rules (``orchestrator.sim.controller.workload``): jobs
  submitted at their times, run first in first out on idle hosts, hosts joining after a drawn
  boot-and-join latency;
* :mod:`.clock` — the virtual clock every part reads; nothing sleeps.

The model itself (:mod:`.model`) is data: the jobs, the latencies, the refusal windows and the
losses. :mod:`.recorded` draws it from a flight recording (docs/recording.md), :mod:`.swf` from a
Standard Workload Format trace. :mod:`.runner` runs the passes; :mod:`.figures` is what a run
comes to (cost, host-hours, pending host-minutes, launches, returns, losses, series to plot),
for the replay and for what the recording shows happened.
"""
