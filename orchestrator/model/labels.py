"""The toolkit's tags as one cloud's labels: the key map and value encoding of a provider module.

Some clouds take ``xce:cluster=demo`` as a tag as it is (EC2, Nova, the simulated cloud); others
have labels whose keys and values hold only some characters (lower-case letters, digits, ``_``
and ``-``, at most 63 of them, say). A provider module's registry entry
(:mod:`orchestrator.model.modules`) says which, and :class:`LabelMap` is the one place that
turns the toolkit's tags into that cloud's labels (the write path: the variables the working
directory hands Terraform) and the labels back into the toolkit's tags (the read path: the
desired set, the Terraform state's ``instances`` output, the tagged listing). Everything above
the working directory only ever sees the toolkit's own keys (``xce:cluster``...).

**Keys.** Each tag of :data:`~orchestrator.model.tags.TOOLKIT_TAGS` has one label key (itself
unless the module maps it); no two share one. A label carrying the toolkit key itself where the
module maps that key elsewhere is not read as the toolkit's (the module never writes it there).
A site's tag is written under its own key, never under a toolkit tag's label key.

**Values** of the toolkit's tags, where the module names an ``escape`` character:

* a value whose every character is allowed and which does not start with the escape is written
  as it is (every cluster, provider and template name, op id, lifetime and ``true``);
* any other value is written as the escape, then the value with each character the labels
  refuse, and the escape itself, as the escape and two lower-case hex digits per UTF-8 byte
  (``_`` escape: epoch ``3.17`` → ``_3_2e17``, ``_x`` → ``__5fx``).

The written forms of two different values differ (verbatim ones never start with the escape,
encoded ones always do, and the escaping is a prefix code), so reading back is exact. A label
that is no written form (a hand-edited ``_zz``, say) is read as its own text: it starts with
the escape, so it never equals a name the toolkit writes (names start with a letter) and a
cluster's or provider's ownership is never read into it, while a hand-set ``xce:protect`` of
any text still protects. Without an escape a value must fit the labels as it is; a site's tags
always must. What cannot be written is a :class:`LabelError`: one line naming key and value.
A module whose labels take any text under the tags' own keys (the shipped ones) writes the
tags as they are and leaves refusing them to its cloud, as before label maps.

Data only: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from orchestrator.model import tags as owner

# Characters a tag key or value may hold where the cloud takes any printable text (EC2 tags,
# Nova metadata, the simulated cloud): the owner tags' ``:`` among them.
ANY_TAG_TEXT: Final = r"[^\x00-\x1f\x7f]"

_HEX: Final = "0123456789abcdef"
_TOOLKIT: Final = frozenset(owner.TOOLKIT_TAGS)


class LabelError(ValueError):
    """A tag the module's labels cannot carry: ``key``, ``value`` and why, in one line."""

    def __init__(self, key: str, value: str, why: str) -> None:
        super().__init__(f"tag {key}={value!r}: {why}")
        self.key = key
        self.value = value
        self.why = why


@dataclass(frozen=True)
class LabelMap:
    """How one provider module's cloud carries tags as labels (see the module docstring).

    ``keys``: toolkit tag key → label key (only toolkit tags; unmapped ones keep their key);
    ``chars``: a regular expression of ONE character every label key and value must match;
    ``escape``: the character that starts an encoded value ("": values are written as they are
    or refused); ``max_length``: the longest label key or value the cloud takes (0: no limit).
    ValueError at construction when the map is not collision-free or the escape cannot work.
    """

    module: str
    keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    chars: str = ANY_TAG_TEXT
    escape: str = ""
    max_length: int = 0
    # Label key → toolkit key, for every toolkit tag read back through the map (filled in).
    reverse: Mapping[str, str] = field(init=False, repr=False, compare=False)
    _one: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _all: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"provider module {self.module!r}"
        strange = sorted(set(self.keys) - _TOOLKIT)
        if strange:
            raise ValueError(
                f"{where}: tag_keys maps only the toolkit's tags ({', '.join(owner.TOOLKIT_TAGS)}), not {strange}"
            )
        labels = [self.label_key(k) for k in owner.TOOLKIT_TAGS]
        shared = sorted({label for label in labels if labels.count(label) > 1})
        if shared:
            raise ValueError(f"{where}: tag_keys writes two toolkit tags under the same label key {shared}")
        one = re.compile(f"(?:{self.chars})")
        object.__setattr__(self, "_one", one)
        object.__setattr__(self, "_all", re.compile(f"(?:{self.chars})*"))
        if self.escape:
            if len(self.escape) != 1 or not one.fullmatch(self.escape):
                raise ValueError(f"{where}: tag_escape {self.escape!r} is not one character its labels take")
            if not all(one.fullmatch(c) for c in _HEX):
                raise ValueError(f"{where}: tag_escape needs labels that take the digits 0-9 and a-f")
        mapped = {self.label_key(k): k for k in owner.TOOLKIT_TAGS if self.label_key(k) != k or self.escape}
        object.__setattr__(self, "reverse", MappingProxyType(mapped))

    @property
    def identity(self) -> bool:
        """Whether labels are the tags themselves (no key mapped, no value encoded)."""
        return not self.reverse

    def label_key(self, key: str) -> str:
        """The label key of tag ``key`` (the key itself unless the module maps it)."""
        return self.keys.get(key, key)

    def fits(self, text: str) -> bool:
        """Whether ``text`` is a label key or value the cloud takes as it is (characters, length)."""
        return bool(self._all.fullmatch(text)) and not (self.max_length and len(text) > self.max_length)

    def verbatim(self, value: str) -> bool:
        """Whether toolkit value ``value`` is its own label value (written as it is)."""
        return self.fits(value) and self._written(value) == value

    def key_problem(self, key: str) -> str | None:
        """Why the cloud would refuse the label key of tag ``key`` (None when it takes it)."""
        label = self.label_key(key)
        if not self._all.fullmatch(label):
            return f"module {self.module}: tag key {label!r} has characters outside {self.chars}"
        if self.max_length and len(label) > self.max_length:
            return f"module {self.module}: tag key {label!r} is longer than {self.max_length} characters"
        return None

    def encode(self, key: str, value: str) -> str:
        """The label value of toolkit tag ``key`` = ``value``; LabelError when it cannot be one."""
        value_label = self._written(value)
        if not self.fits(value_label):
            raise LabelError(key, value, self._refused(value_label))
        return value_label

    def decode(self, text: str) -> str:
        """The toolkit value a label value stands for (``text`` itself when it is no written form)."""
        if not self.escape or not text.startswith(self.escape):
            return text
        raw = bytearray()
        body, i = text[1:], 0
        while i < len(body):
            if body[i] == self.escape:
                pair = body[i + 1 : i + 3]
                if len(pair) != 2 or any(c not in _HEX for c in pair):
                    return text
                raw.append(int(pair, 16))
                i += 3
            else:
                raw += body[i].encode()
                i += 1
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            return text
        # Only the one written form of a value reads as it: anything else stays its own text.
        return value if self._written(value) == text else text

    @property
    def restricted(self) -> bool:
        """Whether the labels are anything but any text under the tags' own keys."""
        return bool(self.reverse) or self.chars != ANY_TAG_TEXT or bool(self.max_length)

    def to_labels(self, tags: Mapping[str, str]) -> dict[str, str]:
        """``tags`` as the cloud's labels; LabelError naming the first tag that cannot be one.

        Where the labels take any text under the tags' own keys (EC2, Nova, the simulated
        cloud), the tags as they are: what such a cloud refuses, it says itself.
        """
        if not self.restricted:
            return dict(tags)
        out: dict[str, str] = {}
        for key, value in tags.items():
            if key in _TOOLKIT:
                out[self.label_key(key)] = self.encode(key, value)
                continue
            if key in self.reverse:
                raise LabelError(key, value, f"{key} is the label key of {self.reverse[key]}")
            for text in (key, value):
                if not self.fits(text):
                    raise LabelError(key, value, self._refused(text))
            out[key] = value
        return out

    def from_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The toolkit's tags back from the cloud's ``labels`` (site tags as they are)."""
        if not self.reverse:
            return dict(labels)
        out = {k: v for k, v in labels.items() if k not in self.reverse and not self._moved(k)}
        for label, key in self.reverse.items():
            if label in labels:
                out[key] = self.decode(labels[label])
        return out

    def _moved(self, key: str) -> bool:
        """A toolkit key the module writes under another label key."""
        return key in _TOOLKIT and self.label_key(key) != key

    def _written(self, value: str) -> str:
        """The label form of a toolkit value, before the length check."""
        if self.escape and (value.startswith(self.escape) or not self._all.fullmatch(value)):
            return self.escape + "".join(self._escaped(c) for c in value)
        return value

    def _escaped(self, char: str) -> str:
        if char != self.escape and self._one.fullmatch(char):
            return char
        return "".join(f"{self.escape}{b:02x}" for b in char.encode())

    def _refused(self, text: str) -> str:
        if not self._all.fullmatch(text):
            return f"the labels take only characters of {self.chars}"
        return f"the labels take at most {self.max_length} characters ({len(text)} here)"


# Tags as they are: the labels of a cloud that takes any text under the tags' own keys (a bare
# working directory path, a module the toolkit does not know).
AS_IS: Final = LabelMap("")
