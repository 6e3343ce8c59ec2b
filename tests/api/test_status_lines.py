"""What a client reads off the wire from Daphne: status lines with their reason phrase, JSON refusals."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from approvals.server import daphne_requests
from tests.e2e.conftest import ROOT, _start_daphne, _stop
from tests.support import templates
from tests.support.server import TEST_SETTINGS

# The module's tests share its server: one worker runs them all, so it is started once, not once per
# worker.
pytestmark = [pytest.mark.xdist_group("test_status_lines"), pytest.mark.own_sqlite]

_TOKEN = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from approvals.services.tokens import create_token
user = get_user_model().objects.create_user("wire", password=None)
user.groups.add(Group.objects.get(name="Reviewers"))
print(create_token(user, name="wire").plaintext)
"""


@pytest.fixture(scope="module")
def daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], int]]:
    """The app under Daphne, one decision a minute per token; its address, a reviewer's header and
    the server's process id."""
    tmp = tmp_path_factory.mktemp("status-lines")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": TEST_SETTINGS,
        "DATABASE_URL": f"sqlite:///{tmp / 'wire.sqlite3'}",
        "AGENTS_RUNTIME": "tests.support.mastra_agents:runtime",
        "REDIS_URL": "",
        "TASKS_BACKEND": "immediate",
        "API_DECISION_RATE_LIMIT": "1/60",
        "DEBUG": "true",  # static files from static/, as `make run` serves them
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    templates.migrated(env["DATABASE_URL"], env)
    token = templates.run(env, "shell", "--command", _TOKEN, timeout=120).strip().splitlines()[-1]
    process, port = _start_daphne(env, tmp / "daphne.log")
    try:
        yield f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}, process.pid
    finally:
        _stop(process)


@pytest.fixture
def served(daphne: tuple[str, dict[str, str], int]) -> tuple[str, dict[str, str]]:
    """The server's address and a reviewer's header."""
    base, auth, _ = daphne
    return base, auth


def _cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far (its user and system time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _memory_bytes(pid: int, field: str = "VmRSS") -> int:
    """The memory process ``pid`` holds now (``VmRSS``) or held at most so far (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_a_form_costs_the_server_no_more_than_any_body_of_its_size(
    daphne: tuple[str, dict[str, str], int],
) -> None:
    """Twisted parsed a url-encoded body into arguments Daphne never reads, on the event loop, before
    Daphne passed it on: one anonymous 15 MB form held every page and socket of the process for
    seconds. Django refuses it on a thread, as it refuses any body over its limit. Forms just under
    the body limit (approvals/server/daphne_requests.py), sent a few times over, counted in the
    server's CPU time, which a busy machine does not inflate as it does the wall clock."""
    base, _, pid = daphne
    limit = daphne_requests.max_body_bytes()
    assert limit is not None
    fields = []
    size = 0
    for i in range(1_000_000):
        field = f"f{i}=1"
        size += len(field) + 1
        if size > limit:
            break
        fields.append(field)
    body = "&".join(fields).encode()
    costs = {}
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        before = _cpu_seconds(pid)
        for _ in range(8):
            response = requests.post(
                f"{base}/accounts/login/", data=body, headers={"Content-Type": content_type}, timeout=120
            )
            assert response.status_code in (400, 403), content_type
        costs[content_type] = _cpu_seconds(pid) - before

    assert costs["application/x-www-form-urlencoded"] < costs["text/plain"] + 1.0, costs


def test_a_body_announced_over_the_limit_is_refused_before_it_is_sent(
    daphne: tuple[str, dict[str, str], int],
) -> None:
    """Daphne took any body, however long: a client that asks first (``Expect: 100-continue``) is
    told 413 and sends nothing."""
    base, _, _ = daphne
    limit = daphne_requests.max_body_bytes()
    assert limit is not None
    with socket.create_connection(("127.0.0.1", _port(base)), timeout=30) as client:
        client.sendall(
            b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {100 * limit}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer and (data := client.recv(4096)):
            answer += data

    assert answer.startswith(b"HTTP/1.1 413 Content Too Large\r\n"), answer


def _chunked_post(port: int, chunk: bytes, chunks: int) -> bytes:
    """A chunked POST of ``chunks`` times ``chunk`` to the sign-in page, sent until the server
    answers or hangs up; what it answered."""
    piece = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    batch = max(1, (1 << 20) // len(piece))
    with socket.create_connection(("127.0.0.1", port), timeout=120) as client:
        client.sendall(
            b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            for sent in range(0, chunks, batch):
                client.sendall(piece * min(batch, chunks - sent))
            client.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # hung up on: the answer, if it came before, is in the socket's buffer
        try:
            return client.recv(4096)
        except OSError:
            return b""


@pytest.mark.parametrize(
    ("chunk", "chunks"),
    [(b"x" * (1 << 20), 300), (b"x", 2_500_000)],
    ids=["300-MB-body", "body-in-one-byte-chunks"],
)
def test_a_chunked_body_costs_the_server_little_however_it_is_cut(
    daphne: tuple[str, dict[str, str], int], chunk: bytes, chunks: int
) -> None:
    """Twisted took a chunked body of any length to a temporary file, Daphne read all of it into
    memory on the event loop, Django copied it again: one anonymous 300 MB POST cost the process
    seconds of CPU and 300 MB of memory it kept. Cut into one-byte chunks, 2.5 MB took 8 s of CPU
    to decode. Either is refused as soon as it is over (413, the connection closed)."""
    base, _, pid = daphne
    cpu, memory = _cpu_seconds(pid), _memory_bytes(pid, "VmHWM")

    answer = _chunked_post(_port(base), chunk, chunks)

    assert _cpu_seconds(pid) - cpu < 1.0
    assert _memory_bytes(pid, "VmHWM") - memory < 50 * 1024 * 1024
    assert answer == b"" or answer.startswith(b"HTTP/1.1 413 "), answer[:100]


def _until_idle(pid: int, most_seconds: float = 60.0) -> None:
    """Wait until process ``pid`` has used no CPU for a second (at most ``most_seconds``)."""
    deadline = time.monotonic() + most_seconds
    used = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _cpu_seconds(pid)
        if now - used < 0.02:
            return
        used = now


def test_pipelined_requests_whose_answers_go_unread_hold_one_answer(
    daphne: tuple[str, dict[str, str], int],
) -> None:
    """A client sent a thousand pipelined requests for a stylesheet and read none of the answers:
    Daphne wrote every answer into the connection's send buffer (37 KB for 45 bytes sent), ten such
    anonymous connections held 290 MB of the process. Each request now waits for the client to take
    the answer before it, and a connection holds about one."""
    base, _, pid = daphne
    request = b"GET /static/countersign/app.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    assert requests.get(f"{base}/static/countersign/app.css", timeout=30).status_code == 200
    memory = _memory_bytes(pid)  # (now, not the peak: an earlier test's may be higher)
    clients = []
    try:
        for _ in range(10):
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", _port(base)))
            client.sendall(request * 1000)
            clients.append(client)
        _until_idle(pid)
        grown = _memory_bytes(pid) - memory
    finally:
        for client in clients:
            client.close()

    assert grown < 60 * 1024 * 1024, f"{grown / 2**20:.0f} MB"
    # (The server still answers, and a client that reads gets every answer.)
    with socket.create_connection(("127.0.0.1", _port(base)), timeout=30) as client:
        client.sendall(request * 50)
        answers = b""
        while answers.count(b"HTTP/1.1 200 ") < 50 or not answers.endswith(b"}\n"):
            data = client.recv(65536)
            assert data, answers.count(b"HTTP/1.1 200 ")
            answers += data


def test_a_429_says_too_many_requests_with_retry_after(served: tuple[str, dict[str, str]]) -> None:
    base, auth = served
    decline = f"{base}/api/agents/approver/decline-tool-call"
    body = {"runId": "no-such-run", "toolCallId": "c1"}

    first = requests.post(decline, json=body, headers=auth, timeout=30)
    limited = requests.post(decline, json=body, headers=auth, timeout=30)

    assert first.status_code == 404
    assert (limited.status_code, limited.reason) == (429, "Too Many Requests")
    assert 55 <= int(limited.headers["Retry-After"]) <= 70
    assert limited.headers["Content-Type"] == "application/json"
    assert limited.json()["code"] == "rate_limited"


def test_an_unknown_path_under_api_is_a_json_404(served: tuple[str, dict[str, str]]) -> None:
    base, auth = served

    for method, path in (("GET", "/api/nope"), ("POST", "/api/v1/agents/approver/nope"), ("GET", "/api/v1/")):
        response = requests.request(method, f"{base}{path}", headers=auth, timeout=30)

        assert (response.status_code, response.reason) == (404, "Not Found"), path
        assert response.headers["Content-Type"] == "application/json", path
        assert response.json()["code"] == "no_route", path
    # The pages keep their HTML 404.
    page = requests.get(f"{base}/nope", timeout=30)
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")
