"""The package's layers point one way (issue 17): evaluation never needs training, and an install puts
only `cfbench` into site-packages."""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cfbench"

# (package directory, module prefixes nothing inside it may import), lower layers first.
FORBIDDEN = [
    ("harness", ("cfbench.leaderboard", "cfbench.training")),
    ("leaderboard", ("cfbench.training",)),
    ("training/core", ("cfbench.training.selfevolve", "cfbench.training.audit")),
    ("training/selfevolve", ("cfbench.training.audit",)),
]


def imported_modules(path: Path, root: Path = REPO) -> set[str]:
    """Every module a file imports, function-local imports included (they load the layer just the same)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from cfbench import training` counts
    return names


def test_no_module_imports_a_layer_above_it():
    violations = [
        f"{path.relative_to(REPO)} imports {name}"
        for layer, forbidden in FORBIDDEN
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name.startswith(forbidden)
    ]
    assert violations == []


def test_the_static_check_sees_relative_and_function_local_imports(tmp_path):
    """Guards the check above: a violation hidden in a function or a relative import is still found."""
    fake = tmp_path / "cfbench" / "harness" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from ..training import cli\n    import cfbench.leaderboard.build\n")
    assert imported_modules(fake, tmp_path) == {"cfbench.training.cli", "cfbench.leaderboard.build"}


def test_importing_every_evaluation_and_leaderboard_module_loads_no_training_module():
    """A fresh interpreter (this one has training loaded by other tests) imports each module that pkgutil finds."""
    script = """
import importlib, json, pkgutil, sys
import cfbench.harness, cfbench.leaderboard
names = [m.name for pkg in (cfbench.harness, cfbench.leaderboard)
         for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "training": sorted(m for m in sys.modules if m.startswith("cfbench.training"))}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True).stdout)
    assert {"cfbench.harness.cli", "cfbench.harness.retrievers.bm25", "cfbench.leaderboard.cli"} <= set(out["imported"])
    assert out["training"] == []


def test_the_built_wheel_installs_only_the_cfbench_package(tmp_path):
    """Runs setuptools' own wheel-metadata hook on the project's pyproject (the step `pip wheel` takes), over a
    copy of the tree holding only the .py files: package discovery needs no data, and the real tree's 23 MB
    would make this slow."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copy(REPO / "README.md", tmp_path)
    shutil.copytree(
        PACKAGE,
        tmp_path / "cfbench",
        ignore=lambda d, names: [n for n in names if n == "__pycache__" or ((Path(d) / n).is_file() and not n.endswith(".py"))],
    )
    (tmp_path / "out").mkdir()
    script = "import setuptools.build_meta as b; print(b.prepare_metadata_for_build_wheel('out'))"
    dist_info = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()[-1]
    assert (tmp_path / "out" / dist_info / "top_level.txt").read_text().split() == ["cfbench"]
