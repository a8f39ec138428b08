"""What a new user gets: every import swapctl makes is a declared dependency."""

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def third_party_imports() -> dict[str, set[str]]:
    """Top-level names imported by swapctl's modules that are neither stdlib nor swapctl -> the files."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "swapctl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "swapctl":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def normalized(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def test_every_third_party_import_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {normalized(r) for r in project["dependencies"]}
    optional = {normalized(r) for extra in project["optional-dependencies"].values() for r in extra}
    dists = packages_distributions()
    missing = {}
    for module, files in third_party_imports().items():
        provided_by = {normalized(d) for d in dists.get(module, [module])}
        if not provided_by & (declared | optional):
            missing[module] = sorted(files)
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"
    assert "docker" in declared  # `swapctl build` is a core verb, not an extra


def test_optional_imports_stay_optional():
    """matplotlib is the [plot] extra: only the plotting module may import it."""
    assert third_party_imports().get("matplotlib", set()) <= {"swapctl/logs/plot.py"}
