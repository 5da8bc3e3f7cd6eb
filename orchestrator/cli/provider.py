"""``xceprov provider ACTION -f FILE``: the provider contract's one-shot form (docs/provider-contract.md).

The five actions of the LSF resource connector and the Symphony host factory, each reading its
JSON document from FILE (``-`` is stdin), printing the JSON answer on stdout (one line) and
exiting with the answer's code: 0 done, 1 a malformed document or an unknown template or
machine (nothing changed), 3 no configuration where the calling consumer keeps it (or an invalid
one), 9 another holder fences the provider, the others as docs/exit-codes.md. Who calls (LSF's
resource connector, a Symphony host factory) and where its configuration is are told by the
environment (``services.contract.consumers``). ``provider work`` is the detached worker a
request starts (not for people).
"""

from __future__ import annotations

import json
import os
import sys
from typing import BinaryIO

import click

from orchestrator.cli import provider_serve
from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.text import printable

# Read at most this much of FILE (a document beyond it is refused by the contract).
READ_LIMIT = 4 * 1024 * 1024 + 1


@click.group("provider")
def provider() -> None:
    """The provider contract of LSF's resource connector and Symphony's host factory.

    Who calls, and so where the configuration is (unless --config or XCEPROV_CONFIG says) and
    which names templates carry, is told by the environment the caller sets: PRO_CONF_DIR for
    LSF, HF_PROVIDER_CONFDIR or HF_CONFDIR with HF_PROVIDER_NAME for a host factory
    (XCEPROV_CONSUMER=lsf|hostfactory|none to say it). See docs/provider-contract.md.
    """


def _read(path: str) -> bytes | str:
    """FILE's bytes (``-``: stdin), or one line saying why it cannot be read."""
    try:
        if path == "-":
            stream: BinaryIO = sys.stdin.buffer
            return stream.read(READ_LIMIT)
        with open(path, "rb") as handle:
            return handle.read(READ_LIMIT)
    except OSError as exc:
        return f"{printable(path)}: cannot read: {exc.strerror or exc}"


def _answer(ctx: CliContext, action: str, path: str, no_bootstrap: bool) -> None:
    from orchestrator.errors import XceprovError
    from orchestrator.services.contract.answers import error_answer, refused
    from orchestrator.services.contract.consumers import contract_config
    from orchestrator.services.provider_contract import ProviderContract

    raw = _read(path)
    if isinstance(raw, str):
        answer = error_answer("bad_input", raw, 1)
    else:
        try:
            # The caller reads stdout: a configuration that is missing or wrong is a JSON answer too.
            loaded, consumer = contract_config(ctx.config_path, os.environ)
        except XceprovError as exc:
            answer = refused(exc)
        else:
            contract = ProviderContract(loaded, bootstrap=not no_bootstrap, consumer=consumer)
            try:
                answer = contract.handle(action, raw)
            finally:
                contract.close()
    click.echo(json.dumps(answer.document, sort_keys=True))
    sys.exit(answer.exit_code)


def _action_command(action: str, summary: str) -> click.Command:
    @click.command(action, help=summary)
    @click.option("-f", "--file", "path", metavar="FILE", required=True, help="The JSON document ('-': stdin).")
    @click.option(
        "--no-bootstrap",
        is_flag=True,
        help="New hosts are complete once created (images that join by themselves); no bootstrap play.",
    )
    @pass_ctx
    def command(ctx: CliContext, path: str, no_bootstrap: bool) -> None:
        _answer(ctx, action, path, no_bootstrap)

    return command


for _action, _summary in (
    ("getAvailableTemplates", "The host templates x providers a scheduler may ask for."),
    ("requestMachines", "Ask for machines of a template: one op, its id the request id (asynchronous)."),
    ("getRequestStatus", "Where requests are: running, complete or complete_with_error, per machine."),
    (
        "requestReturnMachines",
        'Give machines back: one return op, its id the request id (async); busy hosts fail unless "force": true.',
    ),
    ("getReturnRequests", "Machines to close because the cloud takes them back or max_lifetime is near."),
):
    provider.add_command(_action_command(_action, _summary))
provider.add_command(provider_serve.serve)  # the persistent JSON-lines form (its own module)


@provider.command("work", hidden=True)
@pass_ctx
def work(ctx: CliContext) -> None:
    """Carry out one request (the detached worker a request starts; its job on stdin)."""
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.paths import toolkit_root
    from orchestrator.services.contract.session import ContractSession
    from orchestrator.services.contract.worker import carry_out, read_job

    job = read_job(sys.stdin.buffer.read(READ_LIMIT * 4))
    session = ContractSession(job.loaded, toolkit_root(), lambda _request: 0)
    record = carry_out(session, job.request_id, simulated_world(), job.lock_fd)
    if record is None:
        click.echo(printable(f"request {job.request_id}: another worker of it runs; this one did nothing"))
        return
    click.echo(printable(f"request {job.request_id}: {record.worker_state}: {record.message}"))
