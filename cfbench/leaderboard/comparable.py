"""The comparability guard: which runs may be ranked in one table.

Two runs are comparable when they answered the same suite (hash) cut by the same `eval --limit` (or none), under the same protocol version
and knobs, scored by the same metric version, with the same retriever (kind, parameters, corpus and
index hashes). The model's engine settings (engine, threads, batch size, device) never split a
table: they are what is being compared. Where a file or server lived is not part of a retriever's
identity either; its hashes are.
"""

from __future__ import annotations

import json

from cfbench.harness.metrics import METRIC_VERSION
from cfbench.harness.protocol import PROTOCOL_VERSION, Knobs

_LOCATIONS = frozenset({"corpus", "url", "run"})  # paths and addresses; the hashes beside them identify the content


def key(results: dict) -> dict:
    """What must be equal for two runs to share a table."""
    return {
        "suite": {"name": results["suite"]["name"], "sha256": results["suite"].get("sha256")}
        | ({"limit": results["suite"]["limit"]} if results["suite"].get("limit") is not None else {}),
        "protocol": results["protocol"],
        "metric_version": results["metric_version"],
        "retriever": _identity(results["retriever"]),
    }


def differences(mine: dict, theirs: dict, prefix: str = "") -> list[str]:
    """Every field in which two keys differ, as 'field: A vs B'."""
    found = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{prefix}{name}.")
        elif a != b:
            found.append(f"{prefix}{name}: {_show(a)} vs {_show(b)}")
    return found


def partition(items: list, key_of) -> list[tuple[dict, list]]:
    """Items grouped by comparability key; the group to rank first comes first.

    First: a group under the current protocol version, its default knobs and the current metric
    version; then the group with more runs; then the key's text, so the order never depends on
    the order runs were added.
    """
    groups: dict[str, tuple[dict, list]] = {}
    for item in items:
        k = key_of(item)
        groups.setdefault(json.dumps(k, sort_keys=True), (k, []))[1].append(item)
    return [groups[text] for text in sorted(groups, key=lambda text: (not _standard(groups[text][0]), -len(groups[text][1]), text))]


def _standard(k: dict) -> bool:
    protocol = k["protocol"]
    return (
        protocol.get("version") == PROTOCOL_VERSION and protocol.get("knobs") == Knobs().as_dict() and k["metric_version"] == METRIC_VERSION
    )


def _identity(described):
    if isinstance(described, dict):
        return {k: _identity(v) for k, v in described.items() if k not in _LOCATIONS}
    return described


def _show(value) -> str:
    return "absent" if value is None else json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
