"""The settings of the test process and of the processes the tests start: production's
(``config.settings``, read from the same environment), with a password hasher of fewer rounds.

Production's PBKDF2 takes 1,500,000 rounds, ~0.5 s of CPU per ``create_user`` or password login, and
the suite creates users in hundreds of tests and logs in to the servers it starts hundreds of times
(a server that verifies a hash of fewer rounds than its own hasher's also hashes the password again
at its rounds: Django's ``must_update``). ``tests/support/hashers.py`` is production's hasher, with
its bound on concurrent hashes, at 1,000 rounds.

Tests of the settings themselves (``tests/approvals/test_production_settings.py``, the install and
``gc.freeze`` checks) start their processes on ``config.settings``; ``bench/burst.py`` measures
production's hashing.
"""

from config.settings import *  # noqa: F403
from config.settings import PASSWORD_HASHERS as _PRODUCTION_HASHERS

PASSWORD_HASHERS = [
    "tests.support.hashers.QuickPBKDF2PasswordHasher"
    if name == "approvals.policy.BoundedPBKDF2PasswordHasher"
    else name
    for name in _PRODUCTION_HASHERS
]
