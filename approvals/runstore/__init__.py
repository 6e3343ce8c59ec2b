"""The runtime's run store on the Django ORM (``DjangoRunStore``), by job: the store's protocol
methods (``store``), deciding (``decide``), lease reclaim (``leases``), raw SQL (``sql``), rows and
records (``records``), and the decision's audit row (``audit``)."""

from approvals.runstore.records import CorruptRow
from approvals.runstore.store import DjangoRunStore

__all__ = ["CorruptRow", "DjangoRunStore"]
