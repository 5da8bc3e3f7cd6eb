"""``xceprov provider serve``: the provider contract as JSON lines, ``{id, action, input}`` → ``{id, result|error}``.

The same actions and documents as the one-shot scripts (``xceprov provider ACTION -f FILE``),
for a caller that keeps one process open. docs/provider-contract.md, "The persistent JSON-lines
mode", is the promise this module keeps:

- Requests run concurrently on at most ``workers`` threads; each answer is written as one whole
  line (under a lock, flushed) as soon as its request ends, and carries the request's id, so
  answers come in the order requests finish, not the order they came. While every worker is
  busy, no more input is read (the pipe pushes back on the caller).
- A line that is no request (not UTF-8, not JSON, no valid id, over ``max_line_bytes``) is
  answered with an error and the stream goes on; the error carries the line's id if it could be
  read, ``null`` otherwise.
- An id is unique among the requests in flight: a request reusing the id of one still running is
  not run and answered with an error under id ``null`` (the id it reused is in the message), so
  the running request's answer stays the only one under its id. Once answered, an id may be used
  again.
- End of input: the requests in flight finish, their answers are written, then :func:`serve`
  returns 0.
- A stop (SIGTERM, SIGINT; :meth:`Server.request_stop`): no more input is read; lines read but
  not started are answered ``unavailable`` (not run); the requests in flight get
  ``stop_timeout`` to finish. If they do, 0; if not, each is answered ``failed`` (it may still
  take effect: ask ``getRequestStatus``) and the result is :data:`EXIT_ABANDONED`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from orchestrator.services.contract.intake import MAX_DOCUMENT_BYTES
from orchestrator.services.provider_lines import OVERSIZED, Line, LineSplitter
from orchestrator.services.provider_requests import BadRequest, Request, RequestId, parse_request

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 4
# The one-shot form's bound on a document, and room for the request's envelope around it.
DEFAULT_MAX_LINE_BYTES = MAX_DOCUMENT_BYTES + 64 * 1024
DEFAULT_STOP_TIMEOUT = 60.0
EXIT_ABANDONED = 1  # stopped with requests still running past stop_timeout (their answers say so)
_READ_CHUNK = 64 * 1024

# Error types of the contract's error document (docs/provider-contract.md, "Errors").
BAD_INPUT = "bad_input"
UNAVAILABLE = "unavailable"
FAILED = "failed"


class ContractAnswer(Protocol):
    """What the contract answers one request with (``provider_contract.ContractAnswer``)."""

    @property
    def document(self) -> Mapping[str, Any]: ...

    @property
    def exit_code(self) -> int: ...


class Contract(Protocol):
    """The provider contract (``provider_contract.ProviderContract``): ``handle`` is thread-safe."""

    def handle(self, action: str, document: object) -> ContractAnswer: ...


@dataclass(frozen=True)
class ServeOptions:
    """The bounds of one server."""

    actions: Collection[str]
    workers: int = DEFAULT_WORKERS
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stop_timeout: float = DEFAULT_STOP_TIMEOUT


@dataclass
class ServeResult:
    """How a server ended: its exit code, what it answered, and the ids it gave up waiting for."""

    exit_code: int
    answered: int
    abandoned: list[str | int] = field(default_factory=list)
    reason: str = "end of input"


def answer_line(request_id: RequestId, answer: ContractAnswer) -> dict[str, Any]:
    """The JSON-lines answer of one contract answer: ``result`` on success, its error body otherwise."""
    document = dict(answer.document)
    if answer.exit_code == 0:
        return {"id": request_id, "result": document}
    body = document.get("error")
    if not isinstance(body, Mapping):  # the contract always sends {"error": {...}}; never lose a failure
        body = {"type": FAILED, "message": f"the action failed (exit {answer.exit_code})"}
    return {"id": request_id, "error": dict(body)}


def error_line(request_id: RequestId, error_type: str, message: str) -> dict[str, Any]:
    """An error answer made by the server itself (the request never reached the contract)."""
    return {"id": request_id, "error": {"type": error_type, "message": message}}


class Server:
    """One JSON-lines server over a readable descriptor and a binary sink."""

    def __init__(self, contract: Contract, source: int, sink: BinaryIO, options: ServeOptions) -> None:
        if options.workers < 1:
            raise ValueError(f"workers must be at least 1, not {options.workers}")
        self._contract = contract
        self._source = source
        self._sink = sink
        self._options = options
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._in_flight: dict[tuple[type, str | int], Request] = {}
        self._stopping = ""  # the reason of the stop; "" while not stopping
        self._stop_at = 0.0  # time.monotonic() of the stop
        self._answered = 0
        self._sink_broken = False
        self._jobs: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._closed = False

    # -- control ---------------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop reading and let the requests in flight end (thread-safe; not for a signal handler)."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = reason
            self._stop_at = time.monotonic()
            self._cond.notify_all()
            # Under the condition: run() closes the pipe under it, and a closed descriptor's
            # number may already name another file.
            if not self._closed:
                with contextlib.suppress(BlockingIOError):  # a full pipe wakes the reader already
                    os.write(self._wake_write, b"x")

    @property
    def stopping(self) -> bool:
        with self._cond:
            return bool(self._stopping)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> ServeResult:
        """Serve until the end of input or a stop; the result says how it ended."""
        workers = [
            threading.Thread(target=self._work, name=f"provider-serve-{n}", daemon=True)
            for n in range(self._options.workers)
        ]
        for worker in workers:
            worker.start()
        try:
            self._read()
            abandoned = self._drain()
        finally:
            for _ in workers:
                self._jobs.put(None)
            with self._cond:
                self._closed = True
                os.close(self._wake_read)
                os.close(self._wake_write)
        with self._cond:
            reason = self._stopping or "end of input"
        with self._write_lock:
            answered = self._answered
        code = EXIT_ABANDONED if abandoned else 0
        return ServeResult(code, answered, abandoned, reason)

    def _read(self) -> None:
        splitter = LineSplitter(self._options.max_line_bytes)
        while not self.stopping:
            readable, _, _ = select.select([self._source, self._wake_read], [], [])
            if self.stopping:
                return
            if self._source not in readable:
                continue
            try:
                chunk = os.read(self._source, _READ_CHUNK)
            except OSError as exc:  # the input broke (EIO of a hung-up terminal): as its end
                log.warning("provider serve: cannot read requests (%s): taken as the end of input", exc)
                chunk = b""
            lines = splitter.feed(chunk) if chunk else splitter.end()
            for index, line in enumerate(lines):
                if not self._take(line):
                    self._refuse_unstarted(lines[index + 1 :])
                    return
            if not chunk:
                return

    def _take(self, line: Line) -> bool:
        """Answer or start one line; False once stopping (the line is answered as not run)."""
        if line is OVERSIZED:
            limit = self._options.max_line_bytes
            self._write(error_line(None, BAD_INPUT, f"the line is longer than {limit} bytes; it was not read"))
            return True
        assert isinstance(line, bytes)
        if not line.strip():
            return True  # blank lines separate nothing and ask nothing
        parsed = parse_request(line, self._options.actions)
        if isinstance(parsed, BadRequest):
            self._write(error_line(parsed.id, BAD_INPUT, parsed.message))
            return True
        return self._start(parsed)

    def _start(self, request: Request) -> bool:
        key = (type(request.id), request.id)
        with self._cond:
            self._cond.wait_for(lambda: self._stopping or len(self._in_flight) < self._options.workers)
            stopping, duplicate = bool(self._stopping), key in self._in_flight
            if not stopping and not duplicate:
                self._in_flight[key] = request
        if stopping:
            self._refuse_unstarted([request])
            return False
        if duplicate:
            message = f"id {json.dumps(request.id)} is already in use by a request in flight; this one was not run"
            self._write(error_line(None, BAD_INPUT, message))
            return True
        self._jobs.put(request)
        return True

    def _refuse_unstarted(self, lines: list[Line] | list[Request]) -> None:
        """Answer what was read but not started once stopping: not run (``unavailable``)."""
        for item in lines:
            if isinstance(item, Request):
                request_id: RequestId = item.id
            elif isinstance(item, bytes) and item.strip():
                parsed = parse_request(item, self._options.actions)
                request_id = parsed.id
            else:
                continue
            self._write(error_line(request_id, UNAVAILABLE, "not run: the server is stopping"))

    def _work(self) -> None:
        while (request := self._jobs.get()) is not None:
            try:
                answer = answer_line(request.id, self._contract.handle(request.action, request.document))
            except Exception as exc:  # a bug in one action must not end the server nor lose the answer
                log.exception("provider serve: %s (id %s) failed", request.action, request.id)
                answer = error_line(request.id, FAILED, f"internal error: {type(exc).__name__}: {exc}")
            self._finish(request, answer)

    def _finish(self, request: Request, answer: dict[str, Any]) -> None:
        key = (type(request.id), request.id)
        with self._cond:
            if self._in_flight.get(key) is not request:
                return  # abandoned at the stop: its answer was written then
            # Written before it leaves the in-flight set: a drain that sees the set empty has
            # every answer on the sink, and the id is not reused before its answer is out.
            self._write(answer)
            del self._in_flight[key]
            self._cond.notify_all()

    def _drain(self) -> list[str | int]:
        """Wait for the requests in flight (bounded once stopping); the ids given up on."""
        with self._cond:
            while self._in_flight:
                if not self._stopping:
                    self._cond.wait()
                    continue
                remaining = self._stop_at + self._options.stop_timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            abandoned = list(self._in_flight.values())
            self._in_flight.clear()
        for request in abandoned:
            log.warning("provider serve: stop_timeout passed with %s (id %s) still running", request.action, request.id)
            message = (
                f"abandoned: the server stopped before {request.action} ended; "
                "it may still take effect (ask getRequestStatus)"
            )
            self._write(error_line(request.id, FAILED, message))
        return [request.id for request in abandoned]

    def _write(self, answer: dict[str, Any]) -> None:
        data = _encoded(answer)
        with self._write_lock:
            if self._sink_broken:
                return
            try:
                self._sink.write(data)
                self._sink.flush()
                self._answered += 1
                return
            except (OSError, ValueError) as exc:  # the reader went away (EPIPE, a closed file)
                self._sink_broken = True
                log.warning("provider serve: cannot write answers (%s); stopping", exc)
        # Outside the write lock: _finish takes the condition, then this lock.
        self.request_stop("the output is closed")


def _encoded(answer: dict[str, Any]) -> bytes:
    """One answer line; an answer that is not strict JSON (``NaN``, a value JSON has no form for)
    becomes a ``failed`` error under its id: the caller still gets an answer, and valid JSON."""
    try:
        text = json.dumps(answer, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        log.error("provider serve: the answer to id %s is not JSON: %s", answer.get("id"), exc)
        message = f"internal error: the answer is not JSON: {exc}"
        text = json.dumps(error_line(answer.get("id"), FAILED, message), separators=(",", ":"))
    return text.encode("ascii") + b"\n"
