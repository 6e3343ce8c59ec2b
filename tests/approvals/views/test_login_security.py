"""Login throttling and the defaults that keep secrets off the screen."""

from __future__ import annotations

import os
import sys

from django.contrib.auth.models import User
from django.test import Client

from tests.support import zygote
from tests.support.users import PASSWORD


def _login(client: Client, username: str, password: str, address: str) -> int:
    response = client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )
    return response.status_code


def test_repeated_failed_logins_lock_that_user_and_address_for_a_while(
    reviewer: User, settings: object
) -> None:
    attacker = Client()
    for _ in range(4):
        assert _login(attacker, "rita", "guess", "203.0.113.9") == 200  # the form again, with an error
    assert _login(attacker, "rita", "guess", "203.0.113.9") == 429  # the fifth failure locks

    locked = attacker.post(
        "/accounts/login/", {"username": "rita", "password": PASSWORD}, REMOTE_ADDR="203.0.113.9"
    )
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.content.decode()
    assert "_auth_user_id" not in attacker.session

    # The reviewer, from her own address, is not locked out by someone else's guesses.
    assert _login(Client(), "rita", PASSWORD, "198.51.100.7") == 302


def test_a_locked_out_login_says_when_to_try_again(reviewer: User) -> None:
    attacker = Client()
    for _ in range(5):
        _login(attacker, "rita", "guess", "203.0.113.9")

    locked = attacker.post(
        "/accounts/login/", {"username": "rita", "password": PASSWORD}, REMOTE_ADDR="203.0.113.9"
    )

    assert (locked.status_code, locked.reason_phrase) == (429, "Too Many Requests")
    assert locked["Retry-After"] == str(15 * 60)  # LOGIN_COOLOFF_MINUTES
    assert "Too many failed logins" in locked.content.decode()


def test_a_successful_login_resets_the_count(reviewer: User) -> None:
    client = Client()
    for _ in range(4):
        _login(client, "rita", "guess", "198.51.100.7")
    assert _login(client, "rita", PASSWORD, "198.51.100.7") == 302
    for _ in range(4):
        assert _login(Client(), "rita", "guess", "198.51.100.7") == 200
    assert _login(Client(), "rita", PASSWORD, "198.51.100.7") == 302


def test_debug_is_off_unless_asked_for() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    probe = "from django.conf import settings; print(settings.DEBUG)"
    off = zygote.zygote.run([sys.executable, "-c", probe], env=env)
    on = zygote.zygote.run([sys.executable, "-c", probe], env={**env, "DEBUG": "true"})
    assert (off.stdout.strip(), on.stdout.strip()) == ("False", "True")


def test_signed_in_pages_are_never_cached(agents: object, reviewer_client: Client) -> None:
    for path in ("/", "/agents/helpdesk/", "/runs/new/"):
        cache_control = reviewer_client.get(path)["Cache-Control"]
        assert "no-store" in cache_control and "private" in cache_control, (path, cache_control)


def _most_hashes_at_once(logins: int) -> int:
    """How many PBKDF2 computations ran at the same moment while ``logins`` threads checked a password."""
    import hashlib
    import threading
    import time

    from django.contrib.auth.hashers import check_password, make_password

    encoded = make_password("correct horse")
    running, most = 0, 0
    lock = threading.Lock()
    pbkdf2 = hashlib.pbkdf2_hmac

    def counted(*args: object, **kwargs: object) -> bytes:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            time.sleep(0.05)  # long enough for the others to start meanwhile, if they may
            return pbkdf2(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                running -= 1

    start = threading.Barrier(logins)

    def log_in() -> None:
        start.wait()
        assert check_password("correct horse", encoded)

    hashlib.pbkdf2_hmac = counted  # type: ignore[assignment]
    try:
        threads = [threading.Thread(target=log_in) for _ in range(logins)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        hashlib.pbkdf2_hmac = pbkdf2
    return most


def test_a_burst_of_logins_hashes_a_few_passwords_at_a_time_leaving_cores_to_others(settings: object) -> None:
    # The suite's hasher is production's with fewer rounds (tests/support/hashers.py).
    settings.PASSWORD_HASHING_THREADS = 1  # type: ignore[attr-defined]
    assert _most_hashes_at_once(6) == 1
    settings.PASSWORD_HASHING_THREADS = 2  # type: ignore[attr-defined]
    assert _most_hashes_at_once(6) == 2
    settings.PASSWORD_HASHING_THREADS = 0  # type: ignore[attr-defined]  # no bound: all at once
    assert _most_hashes_at_once(6) > 2


def test_the_bounded_hasher_reads_and_writes_djangos_pbkdf2_hashes() -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password

    written_by_django = PBKDF2PasswordHasher().encode("s3cret", "somesalt", iterations=1_000)
    assert check_password("s3cret", written_by_django) and not check_password("other", written_by_django)
    ours = make_password("s3cret")
    assert ours.startswith("pbkdf2_sha256$") and PBKDF2PasswordHasher().verify("s3cret", ours)
