"""Typed results that cross process boundaries: a rank returns a dataclass, its caller gets the same dataclass.

Book: 3.2 the distributed training flow (what each rank reports back).

Used in: no notebook directly (the ranks' results of chapters 3, 5c, 5d, 5g and 6 and of lab 11 come back through it).

A rank's return value comes back through ``torch.save`` and ``torch.load(weights_only=True)``,
which rebuilds tensors, numbers, strings and containers, never a class: a pickle that may build
any class can run any code. So a result class is declared with :func:`record` (an allow-list:
only declared dataclasses of the ``gnnbook`` package), the rank's side writes an instance as a
plain dict with its class's name (:func:`to_plain`), and the caller's side builds the instance
again from that name, for declared classes only (:func:`from_plain`).

Example:
    >>> from dataclasses import dataclass
    >>> @record
    ... @dataclass
    ... class Tally:
    ...     rank: int
    ...     count: int
    >>> plain = to_plain([Tally(0, 3)])
    >>> plain
    [{'__record__': 'gnnbook.base.records:Tally', 'rank': 0, 'count': 3}]
    >>> from_plain(plain)
    [Tally(rank=0, count=3)]
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, TypeVar

__all__ = ["record", "to_plain", "from_plain", "RECORD_KEY"]

RECORD_KEY = "__record__"
_DECLARED: dict[str, type] = {}
T = TypeVar("T", bound=type)


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def record(cls: T) -> T:
    """Declare the dataclass ``cls`` a result that may cross processes (put it above ``@dataclass``)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"@record needs a dataclass; put @dataclass under it on {cls.__qualname__}")
    if not cls.__module__.startswith("gnnbook."):
        raise TypeError(f"@record declares classes of the gnnbook package only, not {_name(cls)}")
    _DECLARED[_name(cls)] = cls
    return cls


def to_plain(value: Any) -> Any:
    """``value`` with every declared record (in lists, tuples and dict values too) as a plain dict."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = _name(type(value))
        if _DECLARED.get(name) is not type(value):
            raise TypeError(f"{name} is not declared with @record, so it cannot cross processes")
        return {RECORD_KEY: name, **{f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain`: plain dicts that name a declared record become that record.
    A name outside the ``gnnbook`` package, or one its module does not declare, raises ValueError."""
    if isinstance(value, dict):
        fields = {k: from_plain(v) for k, v in value.items()}
        name = fields.pop(RECORD_KEY, None)
        return fields if name is None else _declared(name)(**fields)
    if isinstance(value, (list, tuple)):
        return type(value)(from_plain(v) for v in value)
    return value


def _declared(name: str) -> type:
    if name not in _DECLARED:
        module = name.partition(":")[0]
        if not module.startswith("gnnbook."):
            raise ValueError(f"a result names the class {name!r}, outside the gnnbook package: refused")
        importlib.import_module(module)  # importing it runs its @record declarations
    if name not in _DECLARED:
        raise ValueError(f"a result names the class {name!r}, which is not declared with @record: refused")
    return _DECLARED[name]
