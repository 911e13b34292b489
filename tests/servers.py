"""Start a `cfbench ... serve` command as a real server on a free loopback port, and stop it."""

import contextlib
import os
import socket
import subprocess
import sys
import time

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def cli_server(args: list[str], health: str = "/health", wait_s: float = 300.0):
    """Run `python -m cfbench.cli ARGS --port P`; yields http://127.0.0.1:P once `health` answers 200."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", *args, "--port", str(port)],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + wait_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode()}")
            try:
                if requests.get(url + health, timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"server did not answer {health} within {wait_s} s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
