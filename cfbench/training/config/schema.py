"""Typed configs read from and written to JSON: each knob is a frozen-dataclass field that carries its rule.

A config class declares its knobs as fields made with `knob` (a value and the rule it must meet)
or `section` (a nested object with its own class). Construction checks every rule, then the
class's `check` for rules across knobs, so a config in hand is valid; a broken rule raises
KnobError, a one-line CfbenchError naming the knob, its rule and the value. `parse` builds a
config from a JSON object, refusing unknown and missing keys by name and prefixing every error
with the file it came from; `to_json` gives the object back with the same keys (knobs marked
`omit_default` are written only when set, so files and run records made before such a knob
existed read and compare as they were), and `config_text` writes it as the shipped files are
laid out: one knob a line, nested values inline.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from cfbench.harness.errors import CfbenchError

C = TypeVar("C")


class KnobError(CfbenchError):
    def __init__(self, name: str, rule: str, value: Any) -> None:
        self.name, self.rule, self.value = name, rule, value
        super().__init__(f"knob {name} must be {rule}, got {value!r}")

    def inside(self, section: str) -> KnobError:
        return KnobError(f"{section}.{self.name}", self.rule, self.value)


@dataclass(frozen=True)
class Rule:
    text: str  # completes "knob X must be ..."
    holds: Callable[[Any], bool]


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


INT_FROM_0 = Rule("an integer >= 0", lambda v: _integer(v) and v >= 0)
INT_FROM_1 = Rule("an integer >= 1", lambda v: _integer(v) and v >= 1)
NUMBER_FROM_0 = Rule("a number >= 0", lambda v: _number(v) and v >= 0)
OPEN_UNIT = Rule("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1)
FRACTION = Rule("a number in [0, 1]", lambda v: _number(v) and 0 <= v <= 1)
TEXT = Rule("a non-empty string", lambda v: isinstance(v, str) and bool(v))
ANY_TEXT = Rule("a string", lambda v: isinstance(v, str))
FLAG = Rule("true or false", lambda v: isinstance(v, bool))


def one_of(choices: tuple[str, ...]) -> Rule:
    return Rule(f"one of {', '.join(choices)}", lambda v: v in choices)


def or_absent(rule: Rule) -> Rule:
    return Rule(f"{rule.text} (or absent)", lambda v: v is None or rule.holds(v))


def knob(rule: Rule, default: Any = dataclasses.MISSING, *, omit_default: bool = False, key: str | None = None):
    """A field whose value must meet `rule`; `key` is its JSON name when that is no Python name (mix's "two-hop")."""
    return dataclasses.field(default=default, metadata={"rule": rule, "omit_default": omit_default, "key": key})


def section(cls: type, *, default: Any = dataclasses.MISSING, omit_default: bool = False):
    """A nested JSON object read into `cls` (any dataclass whose own construction checks it, e.g. Knobs)."""
    factory = dataclasses.MISSING if default is dataclasses.MISSING else (lambda: default)
    return dataclasses.field(default_factory=factory, metadata={"section": cls, "omit_default": omit_default, "key": None})


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key") or f.name


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


class Checked:
    """Mixin for config dataclasses: checks every knob's rule on construction, then `check`."""

    def __post_init__(self) -> None:
        for f in fields(self):
            rule = f.metadata.get("rule")
            value = getattr(self, f.name)
            if rule is not None and not rule.holds(value):
                raise KnobError(_key(f), rule.text, list(value) if isinstance(value, tuple) else value)
        self.check()

    def check(self) -> None:
        """Rules across knobs; raise KnobError (or a CfbenchError saying what to change)."""

    def __or__(self: C, changes: dict) -> C:
        """A copy with some knobs changed, given as JSON values (as in a config file) and checked like a file's."""
        return parse(type(self), {**to_json(self), **changes}, "changed config")


def parse(cls: type[C], data: Any, where: str) -> C:
    """`cls` from a JSON object; every error is one line that starts with `where` (the file)."""
    try:
        return _build(cls, data, "")
    except CfbenchError as e:
        raise CfbenchError(f"{where}: {e}") from None


def _build(cls: type[C], data: Any, prefix: str) -> C:
    if not isinstance(data, dict):
        raise CfbenchError(f"{prefix.rstrip('.') or 'the config'} must be a JSON object, got {data!r}")
    known = {_key(f): f for f in fields(cls)}
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"did you mean '{prefix}{close[0]}'? " if close else f"known keys: {', '.join(known)}; "
            raise CfbenchError(f"unknown key '{prefix}{key}'; {hint}remove or rename it")
    values = {}
    for key, f in known.items():
        if key not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CfbenchError(f"missing key '{prefix}{key}'; add it (the shipped configs in cfbench/training/configs have every key)")
            continue
        value = data[key]
        if "section" in f.metadata:
            value = _build(f.metadata["section"], value, f"{prefix}{key}.")
        elif isinstance(value, list):
            value = tuple(value)  # frozen and comparable; written back as a list
        values[f.name] = value
    try:
        return cls(**values)
    except KnobError as e:
        raise (e.inside(prefix.rstrip(".")) if prefix else e) from None


def to_json(config: Any) -> dict:
    """The JSON object `parse` reads back into an equal config."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("omit_default") and value == _default(f):
            continue
        if is_dataclass(value):
            value = to_json(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[_key(f)] = value
    return out


def with_settings(config: C, settings: tuple[str, ...]) -> C:
    """`config` with the command line's `--set KEY=VALUE` settings: KEY a knob's JSON name, dotted into a section
    (knobs.max_obs_tokens), VALUE read as JSON (1e-3, true, [1, 2], "text") or else taken as a string; the result
    is checked like a config file, every error naming the setting. A knob set in a section keeps its siblings; a
    section given whole (--set 'knobs={...}') replaces it, its knobs left out taking their defaults."""
    data, seen = to_json(config), set()
    for item in settings:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise CfbenchError(f"--set {item!r}: write KEY=VALUE, e.g. --set learning_rate=1e-3 or --set knobs.max_obs_tokens=500")
        if key in seen:
            raise CfbenchError(f"--set {item!r}: {key} is set twice; give each knob once")
        seen.add(key)
        try:
            value = json.loads(text, parse_constant=_finite_only)
        except json.JSONDecodeError:
            value = text
        *path, last = key.split(".")
        node = data
        for i, name in enumerate(path):
            if node.get(name) is None:  # a section left at its default (omitted) or absent: an unknown one is refused by parse
                node[name] = {}
            if not isinstance(node[name], dict):
                raise CfbenchError(f"--set {item!r}: {'.'.join(path[: i + 1])} is no section of the config; set a knob by its name")
            node = node[name]
        node[last] = value
    return parse(type(config), data, f"--set {' '.join(settings)}")


def _finite_only(name: str) -> float:
    raise CfbenchError(f"--set: {name} is not a finite number; give a number such as 1e-3")


def config_text(config: Any) -> str:
    """The layout of the shipped config files: one top-level key a line, nested values inline."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in to_json(config).items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CfbenchError(f"{path}: not JSON ({e.msg} at line {e.lineno}); fix the file") from None
