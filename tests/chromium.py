"""Headless Chromium driven over the DevTools protocol, for tests that open a generated page.

Debian's `chromium` is required (README's test command, scripts/test, installs it); without it the test fails and says so.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import websocket

LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")


class Chromium:
    """One headless browser with one page; `open` loads a file, `evaluate` runs JavaScript in it."""

    def __init__(self, profile: Path) -> None:
        binary = shutil.which("chromium")
        if binary is None:
            raise AssertionError("chromium not found: install Debian's chromium (apt-get install chromium); scripts/test does this")
        self.process = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.socket = None
        self.calls = 0
        self.events: list[dict] = []
        try:
            browser_url = self._listening_url(deadline=time.monotonic() + 60)
            port = browser_url.split("/")[2].split(":")[1]
            pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            page = next(t for t in pages if t["type"] == "page")
            self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def _listening_url(self, deadline: float) -> str:
        seen = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            seen.append(line)
            match = LISTENING.search(line)
            if match:
                return match.group(1)
        raise AssertionError("chromium did not start its DevTools endpoint:\n" + "".join(seen[-20:]))

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.calls:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)  # an event that came before the answer: wait_for may need it

    def wait_for(self, event: str) -> dict:
        while True:
            message = self.events.pop(0) if self.events else json.loads(self.socket.recv())
            if message.get("method") == event:
                return message["params"]

    def open(self, path: Path) -> None:
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def viewport(self, width: int, height: int) -> None:
        """Lay pages out as on a screen of this size in CSS pixels (scrollbars included, as on a desktop)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def screenshot(self, path: Path) -> Path:
        """The whole page, not just the viewport, as a PNG."""
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stderr.close()
