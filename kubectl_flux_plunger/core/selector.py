"""Kubernetes label selectors (the ``-l`` of every verb and of ``serve``): parse, validate and
match them as apimachinery's ``labels.Parse`` does, so a release is in or out of a
flux-plunger's selection by the same rules the apiserver's ``labelSelector`` applies.

Forms (comma-joined, AND): ``k=v``, ``k==v``, ``k!=v``, ``k`` (exists), ``!k`` (does not
exist), ``k in (a,b)``, ``k notin (a,b)``, ``k>1``, ``k<1``.  Keys are qualified names
(``[prefix/]name``: a DNS subdomain of at most 253 characters, a name of at most 63), values
label values (at most 63, possibly empty).  ``!=`` and ``notin`` also match an object without
the key, as in Kubernetes.  Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Op", "Requirement", "Selector", "SelectorError", "parse"]


class SelectorError(ValueError):
    """The selector does not parse or names an invalid key or value (one line)."""


class Op(str, enum.Enum):
    EXISTS = "exists"
    NOT_EXISTS = "!"
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    GT = ">"
    LT = "<"


_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            raise SelectorError(f"invalid key {key!r}: the prefix before '/' must not be empty")
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            raise SelectorError(
                f"invalid key {key!r}: the prefix must be a DNS subdomain (lower-case "
                "alphanumerics, '-' and '.', at most 253 characters)"
            )
    if not name:
        raise SelectorError(f"invalid key {key!r}: the name part must not be empty")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise SelectorError(
            f"invalid key {key!r}: the name part must be at most 63 alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )


def _check_value(key: str, value: str) -> None:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise SelectorError(
            f"invalid value {value!r} for {key!r}: a label value must be empty or at most 63 "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Op
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op is Op.EXISTS:
            return has
        if self.op is Op.NOT_EXISTS:
            return not has
        if self.op in (Op.EQUALS, Op.IN):
            return has and value in self.values
        if self.op in (Op.NOT_EQUALS, Op.NOT_IN):
            return not has or value not in self.values
        # GT / LT: the label's value must be an integer, as in apimachinery
        try:
            have = int(value) if value is not None else None
        except ValueError:
            return False
        if have is None:
            return False
        want = int(self.values[0])
        return have > want if self.op is Op.GT else have < want

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return self.key
        if self.op is Op.NOT_EXISTS:
            return f"!{self.key}"
        if self.op in (Op.IN, Op.NOT_IN):
            return f"{self.key} {self.op.value} ({','.join(self.values)})"
        return f"{self.key}{self.op.value}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    """A parsed selector; ``text`` is what the user wrote (what is sent to the apiserver)."""

    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    def matches_object(self, obj: Mapping[str, object] | None) -> bool:
        md = (obj or {}).get("metadata")
        labels = md.get("labels") if isinstance(md, Mapping) else None
        return self.matches(labels if isinstance(labels, Mapping) else None)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# -- the lexer and parser (apimachinery's grammar) ---------------------------------------

_SPECIAL = "=!(),<>"
_SPACE = " \t\r\n"


def _tokens(text: str) -> list[str]:
    """Identifiers and operators; ``\0`` ends the list."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE:
            i += 1
            continue
        if ch in _SPECIAL:
            two = text[i : i + 2]
            if two in ("==", "!="):
                out.append(two)
                i += 2
            else:
                out.append(ch)
                i += 1
            continue
        j = i
        while j < n and text[j] not in _SPACE and text[j] not in _SPECIAL:
            j += 1
        out.append(text[i:j])
        i = j
    out.append("\0")
    return out


def _is_ident(tok: str) -> bool:
    return tok != "\0" and tok not in ("==", "!=") and tok not in _SPECIAL


def _say(tok: str) -> str:
    return "the end of the selector" if tok == "\0" else repr(tok)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self) -> str:
        return self.toks[self.pos]

    def take(self) -> str:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def parse(self) -> tuple[Requirement, ...]:
        reqs = [self.requirement()]
        while True:
            tok = self.take()
            if tok == "\0":
                return tuple(reqs)
            if tok != ",":
                raise SelectorError(f"expected ',' or the end of the selector, found {_say(tok)}")
            reqs.append(self.requirement())

    def requirement(self) -> Requirement:
        negate = False
        if self.peek() == "!":
            self.take()
            negate = True
        key = self.take()
        if not _is_ident(key) or key in ("in", "notin"):
            raise SelectorError(f"expected a label key, found {_say(key)}")
        _check_key(key)
        if negate:
            if self.peek() not in (",", "\0"):
                raise SelectorError(
                    f"'!{key}' (does not exist) takes no operator, found {_say(self.peek())}"
                )
            return Requirement(key, Op.NOT_EXISTS)
        op_tok = self.peek()
        if op_tok in (",", "\0"):
            return Requirement(key, Op.EXISTS)
        self.take()
        if op_tok in ("=", "=="):
            return Requirement(key, Op.EQUALS, (self.single(key),))
        if op_tok == "!=":
            return Requirement(key, Op.NOT_EQUALS, (self.single(key),))
        if op_tok in (">", "<"):
            value = self.single(key)
            if not re.fullmatch(r"-?\d+", value):
                raise SelectorError(
                    f"invalid value {value!r} for {key!r}: '{op_tok}' needs an integer"
                )
            return Requirement(key, Op.GT if op_tok == ">" else Op.LT, (value,))
        if op_tok in ("in", "notin"):
            return Requirement(key, Op.IN if op_tok == "in" else Op.NOT_IN, self.values(key))
        raise SelectorError(
            f"expected an operator after {key!r} (=, ==, !=, in, notin, >, <), found {_say(op_tok)}"
        )

    def single(self, key: str) -> str:
        tok = self.peek()
        if tok in (",", "\0"):
            value = ""  # `k=` selects an empty value, as in Kubernetes
        elif _is_ident(tok):
            value = self.take()
        else:
            raise SelectorError(f"expected a value for {key!r}, found {_say(tok)}")
        _check_value(key, value)
        return value

    def values(self, key: str) -> tuple[str, ...]:
        tok = self.take()
        if tok != "(":
            raise SelectorError(f"expected '(' after 'in'/'notin' for {key!r}, found {_say(tok)}")
        values: list[str] = []
        while True:
            tok = self.peek()
            if _is_ident(tok):
                values.append(self.take())
            elif tok in (",", ")"):
                values.append("")  # an empty value between separators
            else:
                raise SelectorError(f"expected a value or ')' for {key!r}, found {_say(tok)}")
            sep = self.take()
            if sep == ")":
                break
            if sep != ",":
                raise SelectorError(
                    f"expected ',' or ')' in the values of {key!r}, found {_say(sep)}"
                )
        if values == [""]:
            raise SelectorError(f"'in'/'notin' for {key!r} needs at least one value")
        for v in values:
            _check_value(key, v)
        return tuple(dict.fromkeys(values))


def parse(text: str) -> Selector:
    """Parse ``text``; raises :class:`SelectorError` (message: what is wrong, one line)."""
    if not text.strip():
        raise SelectorError("the selector is empty")
    try:
        return Selector(text.strip(), _Parser(text).parse())
    except SelectorError as exc:
        raise SelectorError(f"invalid label selector {text!r}: {exc}") from None
