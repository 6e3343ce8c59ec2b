"""A password hasher for the test process: production's (bounded PBKDF2-SHA256), with fewer rounds.

Production's 1,500,000 rounds cost ~0.4 s of CPU per ``create_user`` or password login, and the suite
creates users in hundreds of tests. The hashes stay genuine ``pbkdf2_sha256$<rounds>$...`` strings,
so a server process on the production settings (Daphne, ``manage.py``) still verifies them: it reads
the rounds from the hash. Processes the tests start keep the production hasher.
"""

from __future__ import annotations

from approvals.policy import BoundedPBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(BoundedPBKDF2PasswordHasher):
    iterations = 1_000
