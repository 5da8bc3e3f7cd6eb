"""Hand-built hostile frames: what a malicious controller can put in a 4 MiB frame.

A Cap'n Proto builder cannot make these (it writes every element at full size), so the
message bytes are written word by word here, with offsets taken from the loaded schema.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import capnp

from orchestrator.protocol import framing
from orchestrator.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from orchestrator.protocol.schema import SCHEMA_PATH, Envelope, schema

WORD = 8
INLINE_COMPOSITE = 7
BYTE = 2


def struct_ptr(offset: int, data_words: int, ptr_words: int) -> int:
    """A struct pointer word; ``offset`` in words from the end of the pointer."""
    return ((offset & 0x3FFFFFFF) << 2) | (data_words << 32) | (ptr_words << 48)


def list_ptr(offset: int, size_tag: int, count: int) -> int:
    """A list pointer word (``count`` is words for inline-composite lists, else elements)."""
    return 1 | ((offset & 0x3FFFFFFF) << 2) | (size_tag << 32) | (count << 35)


def _frame(words: list[int], pad_to: int) -> bytes:
    """One segment holding ``words``, zero-padded so the frame is ``pad_to`` bytes."""
    total_words = max(len(words), pad_to // WORD - 1)
    body = struct.pack(f"<{len(words)}Q", *words)
    # Padding as bytes, not as a list of words: the frame's builder should not raise the
    # process' peak memory far above the frame itself (the tests measure peaks).
    return struct.pack("<II", 0, total_words) + body + bytes((total_words - len(words)) * WORD)


def _envelope_header(member: str, request_id: int) -> tuple[list[int], int]:
    """Root pointer + Envelope struct with ``member`` active; returns (words, index of its pointer)."""
    node = Envelope.schema.node.struct
    data_words, ptr_words = node.dataWordCount, node.pointerCount
    discriminant = Envelope.schema.fields[member].proto.discriminantValue
    data = bytearray(data_words * WORD)
    struct.pack_into("<Q", data, 0, request_id)
    struct.pack_into("<H", data, node.discriminantOffset * 2, discriminant)
    words = [struct_ptr(0, data_words, ptr_words), *struct.unpack(f"<{data_words}Q", data)]
    pointer_at = len(words)
    words += [0] * ptr_words
    return words, pointer_at


def zero_sized_struct_list(
    count: int = 2_100_000,
    member: str = "demand",
    list_field: str = "templates",
    request_id: int = 0,
    pad_to: int = DEFAULT_MAX_FRAME_BYTES - 8,
) -> bytes:
    """An Envelope ``member`` (default: a ``demand`` push) whose ``list_field`` holds ``count``
    zero-sized structs: one word on the wire for the whole list."""
    words, at = _envelope_header(member, request_id)
    sub = Envelope.schema.fields[member].schema.node.struct
    words[at] = struct_ptr(0, sub.dataWordCount, sub.pointerCount)
    sub_at = len(words)
    words += [0] * (sub.dataWordCount + sub.pointerCount)
    offset = next(f.slot.offset for f in sub.fields if f.name == list_field)
    p = sub_at + sub.dataWordCount + offset
    words[p] = list_ptr(len(words) - p - 1, INLINE_COMPOSITE, 0)
    words.append(struct_ptr(count, 0, 0))  # the tag: `count` elements of 0 data and 0 pointer words
    return _frame(words, pad_to)


def shared_list_status(count: int = 20_000, pad_to: int = DEFAULT_MAX_FRAME_BYTES - 8) -> bytes:
    """A ``status`` reply whose leases and hosts lists both point at one list of ``count``
    zero-sized structs, and whose demand points back at the status itself (a pointer cycle):
    the largest amount of decoded values a frame within the list limits can ask for."""
    words, at = _envelope_header("status", 1)
    node = schema.ControllerStatus.schema.node.struct
    words[at] = struct_ptr(0, node.dataWordCount, node.pointerCount)
    status_at = len(words)
    words += [0] * (node.dataWordCount + node.pointerCount)
    pointers = {f.name: f.slot.offset for f in node.fields if f.slot.type.which() in ("list", "struct", "text")}
    tag_at = len(words)
    words.append(struct_ptr(count, 0, 0))
    for name in ("leases", "hosts"):
        p = status_at + node.dataWordCount + pointers[name]
        words[p] = list_ptr(tag_at - p - 1, INLINE_COMPOSITE, 0)
    # demand -> the status struct itself: a pointer cycle (a schema-driven reader follows it
    # only as deep as the schema goes).
    p = status_at + node.dataWordCount + pointers["demand"]
    words[p] = struct_ptr(status_at - p - 1, node.dataWordCount, node.pointerCount)
    return _frame(words, pad_to)


def huge_text(member: str = "leaseRevoked", size: int = DEFAULT_MAX_FRAME_BYTES - 4096) -> bytes:
    """A ``leaseRevoked`` push (or another member whose first pointer is Text) with a ``size``-byte text."""
    words, at = _envelope_header(member, 0)
    sub = getattr(schema, {"leaseRevoked": "LeaseRevoked", "error": "Error"}[member]).schema.node.struct
    words[at] = struct_ptr(0, sub.dataWordCount, sub.pointerCount)
    sub_at = len(words)
    words += [0] * (sub.dataWordCount + sub.pointerCount)
    text_ptr = sub_at + sub.dataWordCount  # pointer 0: provider (LeaseRevoked) / message (Error)
    words[text_ptr] = list_ptr(len(words) - text_ptr - 1, BYTE, size)
    text = b"A" * (size - 1) + b"\0"
    padded = text + b"\0" * (-len(text) % WORD)
    total_words = len(words) + len(padded) // WORD
    return struct.pack("<II", 0, total_words) + struct.pack(f"<{len(words)}Q", *words) + padded


# A newer protocol: provisioner.capnp with one more value in three enums, under a file id of its
# own (pycapnp aborts the interpreter when one id is loaded from two paths). The wire layout is
# the same, so its messages are what a controller of a later version would send.
NEWER_VALUES = {
    "FactKind": ("orphanAdopted @7;", "futureKind @8;"),
    "HostState": ("closing @10;", "retired @11;"),
    "HostEventKind": ("interruptionNotice @8;", "migrated @9;"),
    "RejectReason": ("invalid @2;", "quotaExceeded @3;"),
}
# Cached in sys.modules, not in this module: it is imported under two names (``hostile`` and
# ``tests.unit.clients.controller.hostile``), and a second load from another path would abort.
_NEWER_MODULE = "_xceprov_tests_newer_schema"


def newer_schema(directory: Path) -> Any:
    """The newer schema, loaded once per process (written into ``directory`` the first time)."""
    if _NEWER_MODULE not in sys.modules:
        text = SCHEMA_PATH.read_text()
        text = text.replace("@0xee9e5e45a836eaae;", "@0xee9e5e45a836eaaf;", 1)
        for enum, (last, added) in NEWER_VALUES.items():
            head, sep, rest = text.partition(f"enum {enum} {{")
            assert sep, enum
            body, close, tail = rest.partition("}")
            assert last in body, (enum, last)
            text = head + sep + body.replace(last, f"{last}\n  {added}", 1) + close + tail
        path = directory / "provisioner_newer.capnp"
        path.write_text(text)
        sys.modules[_NEWER_MODULE] = capnp.load(str(path))
    return sys.modules[_NEWER_MODULE]


def send_newer(conn: Any, newer: Any, request_id: int, member: str, payload: Any) -> None:
    """Send ``member`` built with the newer schema on a fake controller's connection."""
    env = newer.Envelope.new_message(requestId=request_id, **{member: payload})
    with conn.lock:
        framing.send_frame(conn.sock, env.to_bytes())
