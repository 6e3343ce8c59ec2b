"""A password hasher for the tests: production's (bounded PBKDF2-SHA256), with fewer rounds.

Production's 1,500,000 rounds cost ~0.5 s of CPU per ``create_user`` or password login. The hashes
stay genuine ``pbkdf2_sha256$<rounds>$...`` strings, which a process on production's settings still
verifies (it reads the rounds from the hash). Named by ``tests/support/settings.py``.
"""

from __future__ import annotations

from approvals.policy import BoundedPBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(BoundedPBKDF2PasswordHasher):
    iterations = 1_000
