"""Python processes for the tests, without paying for Python's imports each time.

A test that runs ``manage.py run_agent``, starts Daphne or races eight ``proc_agents`` children wants
what a person starting them gets: processes of their own, each with its settings read from its own
environment, its own database connections, its own signals and exit status. Started the usual way
each one spends ~2 s of CPU importing Django, pydantic-ai and Twisted before it does anything, and
the suite starts a few hundred of them.

So each pytest process keeps one *zygote*: a Python that has imported those libraries (never the
project's settings, nor anything that reads them) and forks the processes the tests ask for. The new
process takes the command's environment, working directory and standard streams, and runs the
command's script, module or code as ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` / ``python -c
CODE ARGS`` would (``runpy``: the same ``__main__``); the test gets a handle like
``subprocess.Popen``'s (its pid, to signal it; ``poll``, ``wait``, ``communicate``; the exit status,
negative for a signal). Only the import work is shared: Django is set up, and every connection
opened, in the new process.

Commands that are not ``sys.executable`` running a script, a module or ``-c`` code (a virtualenv's
console script, as the Procfile test runs it) are started with ``subprocess`` as before; so are
``asyncio``'s.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "manage.py"

#: Imported by the zygote before it forks: what a ``manage.py`` process spends its start-up on. None
#: of them reads Django's settings or installs Twisted's reactor at import (checked at start).
PRELOAD = (
    "pydantic_ai",
    "agents_runtime",
    "django.db.models",
    "django.http",
    "django.urls",
    "django.template",
    "django.core.management",
    "django.contrib.auth.hashers",
    "channels.layers",
    "psycopg",
    # What daphne.server imports (the app lists daphne), short of daphne.server itself: importing it
    # installs Twisted's reactor on a new event loop, which each process must make for itself.
    "twisted.internet.asyncioreactor",
    "twisted.internet.endpoints",
    "twisted.web.http",
    "daphne.http_protocol",
    "daphne.ws_protocol",
    # What the project's modules import besides, once the settings are read (`-X importtime` of a
    # forked `manage.py run_agent`): the AG-UI protocol's models, the model price table pydantic-ai
    # loads on a run's first usage, the metrics and the pool.
    "ag_ui.core",
    "pydantic_ai.ui.ag_ui",
    "genai_prices.data",
    "prometheus_client",
    "psycopg_pool",
    "sqlparse",
    # The MCP gateway and the upstream its tests run (``Zygote.launcher``).
    "mcp.server",
    "mcp.client.stdio",
)

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL


# --- Messages: a length, then JSON -------------------------------------------------------------------


def _encode(payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload).encode()
    return struct.pack("!I", len(data)) + data


def _decode(buffer: bytearray) -> dict[str, Any] | None:
    """The first whole message in ``buffer`` (removed from it), or None while it is incomplete."""
    if len(buffer) < 4:
        return None
    size = struct.unpack("!I", buffer[:4])[0]
    if len(buffer) < 4 + size:
        return None
    message: dict[str, Any] = json.loads(buffer[4 : 4 + size])
    del buffer[: 4 + size]
    return message


def _receive(sock: socket.socket, buffer: bytearray) -> dict[str, Any] | None:
    """The next message (blocking, within the socket's timeout); None if the peer closed first."""
    while (message := _decode(buffer)) is None:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    return message


# --- The tests' side -----------------------------------------------------------------------------------


def _target(command: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """``("module", name, args)``, ``("code", source, args)`` or ``("path", script, args)`` for
    ``python -m NAME``, ``python -c CODE`` or ``python SCRIPT``."""
    if len(command) < 2 or os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    if command[1] == "-m" and len(command) > 2:
        return "module", command[2], list(command[3:])
    if command[1] == "-c" and len(command) > 2:
        return "code", command[2], list(command[3:])
    if not command[1].startswith("-"):
        return "path", command[1], list(command[2:])
    return None


class ForkedProcess:
    """The part of ``subprocess.Popen``'s interface the tests use, for a process the zygote forked."""

    def __init__(
        self, args: Sequence[str], sock: socket.socket, stdout: IO[Any] | None, stderr: IO[Any] | None
    ) -> None:
        self.args = list(args)
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._sock = sock
        self._buffer = bytearray()
        started = _receive(sock, self._buffer)
        if started is None:
            raise RuntimeError(f"the zygote did not start {self.args}")
        self.pid: int = started["pid"]
        self._output: dict[str, list[Any]] = {}
        self._readers: list[threading.Thread] = []

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._sock.settimeout(timeout)
        try:
            done = _receive(self._sock, self._buffer)
        except (TimeoutError, BlockingIOError):
            return None
        if done is None:
            raise RuntimeError(f"lost track of {self.args} (pid {self.pid}): the zygote went away")
        self.returncode = int(done["returncode"])
        self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._sock], [], [], 0)[0]:
            return self._status(None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return status

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the piped streams to their end, then wait; as ``Popen.communicate`` (no input)."""
        if not self._readers:
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)):
                if stream is not None:
                    chunks: list[Any] = []
                    self._output[name] = chunks
                    reader = threading.Thread(target=_read_all, args=(stream, chunks), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        out, err = (self._output.get(name, [None])[0] for name in ("stdout", "stderr"))
        return out, err


def _read_all(stream: IO[Any], into: list[Any]) -> None:
    into.append(stream.read())


def _stream(spec: Any, default: int, opened: list[int]) -> tuple[int, int | None]:
    """(the fd the child gets, the read end the parent keeps for a pipe or None)."""
    if spec is None:
        return default, None
    if spec == PIPE:
        read, write = os.pipe()
        opened.append(write)
        return write, read
    if spec == DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd, None
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


class Zygote:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self._address = ""
        self._registered = False

    def _started(self) -> str:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return self._address
            self._directory = tempfile.TemporaryDirectory(prefix="countersign-zygote-")
            self._address = os.path.join(self._directory.name, "socket")
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote", self._address],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 60
            while not os.path.exists(self._address):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the zygote did not start (its output is above)")
                time.sleep(0.02)
            if not self._registered:
                atexit.register(self.stop)
                self._registered = True
            return self._address

    def popen(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str = ROOT,
        stdin: Any = DEVNULL,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
    ) -> ForkedProcess | subprocess.Popen[Any]:
        """``subprocess.Popen(command, env=env, cwd=cwd, ...)``, forked from the zygote when ``command``
        is this Python running a script or a module (else by ``subprocess``)."""
        target = _target(command)
        if target is None:
            return subprocess.Popen(
                list(command), env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text
            )
        opened: list[int] = []
        try:
            fd_in, _ = _stream(stdin, 0, opened)
            fd_out, read_out = _stream(stdout, 1, opened)
            fd_err, read_err = (fd_out, None) if stderr == STDOUT else _stream(stderr, 2, opened)
            sock = _ask(self._started(), target, env, cwd, [fd_in, fd_out, fd_err])
        finally:
            for fd in opened:
                os.close(fd)
        mode = "r" if text else "rb"
        out = open(read_out, mode, encoding="utf-8" if text else None) if read_out is not None else None  # noqa: SIM115
        err = open(read_err, mode, encoding="utf-8" if text else None) if read_err is not None else None  # noqa: SIM115
        return ForkedProcess(command, sock, out, err)

    def launcher(self, command: Sequence[str]) -> list[str]:
        """A command that runs ``command`` (this Python running a script, a module or ``-c`` code) as a
        child of the zygote, for code that starts its processes itself (the MCP SDK's stdio client):
        a small Python that hands its environment, working directory and standard streams to the
        zygote, passes signals on to the forked process and exits with its status (``--exec``)."""
        if _target(command) is None:
            raise ValueError(f"not this Python running a script, a module or -c code: {command}")
        return [sys.executable, "-m", "tests.support.zygote", "--exec", self._started(), "--", *command]

    def run(
        self, command: Sequence[str], *, env: Mapping[str, str], cwd: Path | str = ROOT, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``."""
        process = self.popen(command, env=env, cwd=cwd, stdout=PIPE, stderr=PIPE, text=True)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        assert process.returncode is not None
        return subprocess.CompletedProcess(list(command), process.returncode, out, err)

    def stop(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=10)
            self._process = None
            if self._directory is not None:
                self._directory.cleanup()
                self._directory = None


#: This pytest process's zygote, started when first used.
zygote = Zygote()


def manage(
    args: list[str], env: Mapping[str, str], *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, "manage.py", *args], env=env, capture_output=True, text=True)``, sooner."""
    return zygote.run([sys.executable, str(MANAGE), *args], env=env, timeout=timeout)


# --- The zygote process --------------------------------------------------------------------------------


def _ask(
    address: str, target: tuple[str, str, list[str]], env: Mapping[str, str], cwd: Path | str, fds: list[int]
) -> socket.socket:
    """Ask the zygote at ``address`` to fork ``target`` with ``fds`` as its standard streams; the
    connection its pid and exit status come back on."""
    kind, name, args = target
    request = _encode({"kind": kind, "name": name, "args": args, "env": dict(env), "cwd": str(cwd)})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        sent = socket.send_fds(sock, [request], fds)
        sock.sendall(request[sent:])
    except BaseException:
        sock.close()
        raise
    return sock


def _binary(fd: int, unbuffered: bool) -> Any:
    raw = io.FileIO(fd, "w", closefd=False)
    return raw if unbuffered else io.BufferedWriter(raw)


def _run_command(request: dict[str, Any]) -> int:
    """In the new process: become the command; its exit status."""
    import runpy
    import traceback

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # What PYTHONPATH would have put on the path of a process started with this environment.
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(_binary(1, unbuffered), write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(
        _binary(2, unbuffered), errors="backslashreplace", line_buffering=True, write_through=unbuffered
    )
    status = 0
    try:
        if request["kind"] == "module":
            sys.argv = [request["name"], *request["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request["name"], run_name="__main__", alter_sys=True)
        elif request["kind"] == "code":
            # As ``python -c``: the code in a new ``__main__`` module, the working directory first on
            # the path.
            sys.argv = ["-c", *request["args"]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(request["name"], "<string>", "exec"), main.__dict__)
        else:
            script = os.path.join(os.getcwd(), request["name"])
            sys.argv = [request["name"], *request["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    # What the interpreter does on its way out: wait for non-daemon threads, then the atexit functions.
    for finish in (threading._shutdown, atexit._run_exitfuncs):  # type: ignore[attr-defined]
        try:
            finish()
        except BaseException:
            traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return status & 0xFF


def _serve_one(connection: socket.socket) -> None:
    """In a child of the zygote: fork the command's process, say its pid, then its exit status."""
    data, fds, _, _ = socket.recv_fds(connection, 65536, 3)
    buffer = bytearray(data)
    request = _receive(connection, buffer)
    if request is None or len(fds) != 3:
        return
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            connection.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(3, 1 << 16)  # as Popen's close_fds
            status = _run_command(request)
        finally:
            os._exit(status)
    for fd in fds:
        os.close(fd)
    connection.sendall(_encode({"pid": pid}))
    _, wait_status = os.waitpid(pid, 0)
    connection.sendall(_encode({"returncode": os.waitstatus_to_exitcode(wait_status)}))


def _reap() -> None:
    """Wait for the children that ended (so that their CPU time counts in the parent's, as usual)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve(address: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # The CEL grammar of routing rules' and grants' conditions is built on a process's first
    # condition (Lark's parser tables, a sizeable part of a short process's CPU): once, here.
    from celpy.celparser import CELParser

    CELParser()
    from django.conf import settings

    assert not settings.configured, "a preloaded module configured Django's settings"
    assert "twisted.internet.reactor" not in sys.modules, "a preloaded module installed a reactor"
    assert threading.active_count() == 1, "the zygote must not fork with threads running"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(64)
    os.rename(address + ".tmp", address)  # the client waits for this name: bound and listening
    parent = os.getppid()
    listener.settimeout(1)
    while True:
        _reap()
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the pytest process is gone
                return
            continue
        if os.fork() == 0:
            status = 0
            try:
                listener.close()
                connection.settimeout(None)
                _serve_one(connection)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        connection.close()


def _exec(address: str, command: list[str]) -> int:
    """``Zygote.launcher``'s process: the forked one's stand-in, to its end."""
    target = _target(command)
    assert target is not None, command
    # A signal that comes before the forked process's pid waits (blocked) until it can be passed on:
    # the process may already be running, and seen running, when its pid reaches this one.
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    sock = _ask(address, target, os.environ, os.getcwd(), [0, 1, 2])
    # Only the forked process holds the streams now: a reader sees their end when it ends.
    with open(os.devnull, "r+b") as null:
        for fd in (0, 1, 2):
            os.dup2(null.fileno(), fd)
    buffer = bytearray()
    started = _receive(sock, buffer)
    if started is None:
        return 1
    for sig in forwarded:
        signal.signal(sig, lambda number, frame: os.kill(started["pid"], number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    done = _receive(sock, buffer)
    code = 1 if done is None else int(done["returncode"])
    if code < 0:  # ended by a signal: end the same way (SIGKILL's handler cannot be set, nor need be)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code & 0xFF


if __name__ == "__main__":
    if sys.argv[1] == "--exec":
        sys.exit(_exec(sys.argv[2], sys.argv[4:]))
    _serve(sys.argv[1])
