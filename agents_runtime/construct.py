"""The runtime's frozen records built in hot loops without their ``__init__``.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: ~4.5 us for a record
of 15 fields on this project's development machine, against ~0.6 us for the same values put in place
directly, and a listing builds two records per run and two per call (a page of 33 runs and 41 calls
turned into records in ~0.9 ms with ``__init__``, ~0.46 ms without). ``construct`` is to these
dataclasses what pydantic's ``model_construct`` is to a model: for code that has just read the values
from its own rows or records, every field given, each already of its type. Nothing is converted (no
``__post_init__``) and no default is filled in; a missing or unknown field is refused, so a field
added to a record later fails loudly here rather than being absent from the instance.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(field.name for field in fields(cls))
    return names


def construct[T](cls: type[T], /, **values: Any) -> T:
    """An instance of the frozen dataclass ``cls`` holding ``values``, one for each of its fields."""
    expected = _field_names(cls)
    if values.keys() != expected:
        given = set(values)
        missing, unknown = sorted(expected - given), sorted(given - expected)
        raise TypeError(f"{cls.__name__} needs every field: missing {missing}, unknown {unknown}")
    record = object.__new__(cls)
    record.__dict__.update(values)
    return record
