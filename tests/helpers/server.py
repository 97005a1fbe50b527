"""bringup-run --server for the server tests (tests/test_server*.py): start it on a free port
(``--port 0``; the port is read from its "listening on" line), talk to it with curl or a raw socket,
stop it with SIGTERM and check it exits 0. Its stderr goes to a file (the log the tests read)."""
from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.native_cli import FAST

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+) ")


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then the exit code (a server that does not stop within timeout is killed: a failure)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not stop within {timeout} s of SIGTERM:\n{self.log_text()}")


def start(build: Path, log: Path, *args: str, timeout: float = 120, argv: list[str] | None = None,
          cwd: Path | None = None) -> Server:
    """bringup-run -m build --server --port 0 [args] (FAST options: no payload check, 256 positions);
    argv: another command line that starts it (bringup serve, a bundle's program), run in ``cwd``."""
    argv = argv or [str(build / "bringup-run"), "-m", str(build), *FAST, "--server", "--port", "0", *args]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=f, stdin=subprocess.DEVNULL, cwd=cwd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = LISTENING.search(log.read_text(errors="replace"))
        if m:
            return Server(proc, int(m.group(1)), log)
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no 'listening on' line within {timeout} s:\n{log.read_text(errors='replace')}")


def curl(*args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """curl -s (the real client); -w prints the status code on the last line."""
    exe = shutil.which("curl")
    assert exe, "curl is missing: `bash bootstrap.sh --test` installs it"
    return subprocess.run([exe, "-s", "-S", "-w", "\n%{http_code}", *args], capture_output=True, input=input, timeout=timeout)


def status_and_body(r: subprocess.CompletedProcess) -> tuple[int, bytes]:
    body, _, code = r.stdout.rpartition(b"\n")
    return int(code), body


def raw(port: int, data: bytes, timeout: float = 60) -> bytes:
    """Send data as is on a new connection, half-close, return everything the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def recv_until(sock: socket.socket, marker: bytes, count: int = 1) -> bytes:
    """Read from sock until marker has arrived count times (or the peer closes)."""
    got = b""
    while got.count(marker) < count:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got
