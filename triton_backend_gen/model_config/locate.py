"""Where fields are in a config's text: a light tree of the protobuf text format, kept only for line numbers.

protobuf's parsed message forgets positions; :func:`locate` rebuilds them from the text so that a finding
can point at the offending line."""

from __future__ import annotations

import bisect
import contextlib
import re
from dataclasses import dataclass, field


def locate(text: str) -> Node:
    """The root node of ``text``, a config that protobuf has already accepted."""
    return _TextTree(text).root()


@dataclass
class Node:
    """One field occurrence in the text: its name, the line of its name, its scalar text or its children.

    An element of a list (``input [ {...}, {...} ]``, ``dims: [ 1, 2 ]``) is one node per element, named like
    the field and placed on the element's line, so the i-th node named ``input`` is ``config.input[i]``."""

    name: str
    line: int
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def all(self, name: str) -> list[Node]:
        return [c for c in self.children if c.name == name]

    def first(self, name: str) -> Node | None:
        return next((c for c in self.children if c.name == name), None)

    def nth(self, name: str, index: int) -> Node | None:
        nodes = self.all(name)
        return nodes[index] if 0 <= index < len(nodes) else None

    def string(self, name: str) -> str | None:
        node = self.first(name)
        return node.value if node is not None else None

    def with_child(self, name: str, child: str, value: str) -> Node | None:
        """The first ``name`` child whose ``child`` field has the string value ``value``."""
        return next((n for n in self.all(name) if n.string(child) == value), None)


_OPEN = {"{": "}", "<": ">", "[": "]"}
_IDENT = re.compile(r"[A-Za-z_][\w.]*|\[[\w./]+\]")


class _TextTree:
    """Builds the :class:`Node` tree of a text that protobuf has already accepted."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.masked = _mask(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        """1-based line of ``offset``."""
        return bisect.bisect_right(self.line_starts, offset)

    def root(self) -> Node:
        node = Node("", 1)
        # The tree is only a locator: a text it cannot follow just yields fewer line numbers.
        with contextlib.suppress(IndexError, ValueError):
            node.children = self._fields(0, len(self.masked))
        return node

    def _skip(self, i: int, end: int) -> int:
        while i < end and (self.masked[i].isspace() or self.masked[i] in ",;"):
            i += 1
        return i

    def _matching(self, i: int) -> int:
        """Offset of the bracket closing the one at ``i``."""
        depth = 0
        for j in range(i, len(self.masked)):
            c = self.masked[j]
            if c in _OPEN:
                depth += 1
            elif c in "}>]":
                depth -= 1
                if depth == 0:
                    return j
        raise ValueError("unbalanced brackets")

    def _fields(self, start: int, end: int) -> list[Node]:
        nodes: list[Node] = []
        i = self._skip(start, end)
        while i < end:
            m = _IDENT.match(self.masked, i)
            if not m:
                raise ValueError(f"unexpected text at offset {i}")
            name, key_line = m.group(0), self.line(i)
            i = self._skip_colon(m.end(), end)
            if self.masked[i] == "[":
                close = self._matching(i)
                nodes.extend(self._list(name, i + 1, close))
                i = close + 1
            else:
                node, i = self._value(name, key_line, i, end)
                nodes.append(node)
            i = self._skip(i, end)
        return nodes

    def _skip_colon(self, i: int, end: int) -> int:
        while i < end and self.masked[i].isspace():
            i += 1
        if i < end and self.masked[i] == ":":
            i += 1
            while i < end and self.masked[i].isspace():
                i += 1
        return i

    def _list(self, name: str, start: int, end: int) -> list[Node]:
        nodes: list[Node] = []
        i = self._skip(start, end)
        while i < end:
            node, i = self._value(name, self.line(i), i, end)
            nodes.append(node)
            i = self._skip(i, end)
        return nodes

    def _value(self, name: str, line: int, i: int, end: int) -> tuple[Node, int]:
        """The node of the message or scalar at ``i``, and the offset after it."""
        if self.masked[i] in "{<":
            close = self._matching(i)
            return Node(name, line, children=self._fields(i + 1, close)), close + 1
        value, i = self._scalar(i, end)
        return Node(name, line, value=value), i

    def _scalar(self, i: int, end: int) -> tuple[str, int]:
        """A scalar's text (strings without quotes; adjacent strings joined) and the offset after it."""
        if self.masked[i] in "\"'":
            parts = []
            while i < end and self.masked[i] in "\"'":
                close = self.masked.index(self.masked[i], i + 1)
                parts.append(self.text[i + 1 : close])
                i = self._skip_space(close + 1, end)
            return "".join(parts), i
        j = i
        while j < end and not self.masked[j].isspace() and self.masked[j] not in ",;]}>":
            j += 1
        return self.text[i:j], j

    def _skip_space(self, i: int, end: int) -> int:
        j = i
        while j < end and self.masked[j].isspace():
            j += 1
        return j if j < end and self.masked[j] in "\"'" else i


def _mask(text: str) -> str:
    """``text`` with comments blanked and string contents replaced by 'x' (same offsets and newlines)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text[i] == "#":
            i = _blank_comment(text, out, i)
        elif text[i] in "\"'":
            i = _mask_string(text, out, i)
        else:
            i += 1
    return "".join(out)


def _blank_comment(text: str, out: list[str], start: int) -> int:
    """Blank, in ``out``, the comment that starts at ``start``; the offset of the newline ending it (or the
    end)."""
    i = start
    while i < len(text) and text[i] != "\n":
        out[i] = " "
        i += 1
    return i


def _mask_string(text: str, out: list[str], start: int) -> int:
    """Replace, in ``out``, the contents of the string whose quote is at ``start`` by 'x' (an escaped quote
    too; the string ends at its closing quote or its line's end); the offset after its closing quote."""
    quote, j = text[start], start + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        if text[j] == "\\":
            out[j] = "x"
            j += 1
        out[j] = "x" if text[j] != "\n" else "\n"
        j += 1
    return j + 1
