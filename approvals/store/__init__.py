"""The runtime's run store on the Django ORM: ``DjangoRunStore`` (``runs``: the class, and a run's life
from parking to its end) and its parts by job: the tables and leases they share (``tables``),
deciding (``decide``), grants (``grants``), deadlines (``deadlines``), listings (``listing``), the
reviewer's queue across agents (``queue``), the
hot reads (``reads``), raw SQL (``sql``), rows and records (``records``), and the audit row of a
decision (``audit``). ``approvals.store.DjangoRunStore`` is its public name (the runtime spec's)."""

from approvals.store.records import CorruptRow
from approvals.store.runs import DjangoRunStore

__all__ = ["CorruptRow", "DjangoRunStore"]
