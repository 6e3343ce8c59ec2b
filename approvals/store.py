"""``approvals.store.DjangoRunStore``, where it has always been importable (it lives in
``approvals.runstore``)."""

from approvals.runstore import CorruptRow, DjangoRunStore

__all__ = ["CorruptRow", "DjangoRunStore"]
