"""What scripts/build_collection.py ships to the Ansible modules is swapctl's own code, standard library only,
and the modules import it rather than restate it (issue 46: engine.py's copy of split_sections had lost the
guard against forged sections that swapctl.facts.status keeps)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from test_ansible import collection  # noqa: F401

from swapctl.facts.sections import split_sections

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_collection", ROOT / "scripts" / "build_collection.py")
assert _spec and _spec.loader
build_collection = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_collection)


def foreign_imports(rel: str) -> list[str]:
    """The imports of swapctl/`rel` that are neither the standard library nor another shipped module."""
    shipped = {f"swapctl/{r}" for r in build_collection.SHIPPED}
    here = Path("swapctl", rel).parent
    out = []
    tree = ast.parse((ROOT / "swapctl" / rel).read_text())
    for block in ast.walk(tree):  # `if TYPE_CHECKING:` imports are for the type checker: they never run
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING":
            block.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] not in sys.stdlib_module_names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module and node.module.split(".")[0] not in sys.stdlib_module_names | {"__future__"}:
                out.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            base = here.parents[node.level - 2] if node.level > 1 else here
            mod = base.joinpath(*node.module.split(".")) if node.module else base
            for a in node.names:  # `from .pkg import mod` names a module; `from .mod import name`, a name in it
                if f"{mod / a.name}.py" not in shipped and f"{mod}.py" not in shipped:
                    out.append(str(mod / a.name) if not node.module else str(mod))
    return out


def test_every_shipped_module_imports_only_the_standard_library_and_other_shipped_modules():
    assert "facts/sections.py" in build_collection.SHIPPED
    assert {rel: foreign_imports(rel) for rel in build_collection.SHIPPED} == dict.fromkeys(build_collection.SHIPPED,
                                                                                           [])


def test_the_import_check_sees_a_third_party_or_unshipped_import(tmp_path, monkeypatch):
    """The check above is not vacuous: an import of the playbook loader, or of tomlkit, is caught (one for the
    type checker only, under `if TYPE_CHECKING:`, never runs)."""
    fake = tmp_path / "swapctl" / "facts"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("import json\nimport tomlkit\nfrom ..playbook import load\nfrom . import sections\n"
                                 "if TYPE_CHECKING:\n    from ..remote import Host\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(build_collection, "SHIPPED", ("facts/bad.py", "facts/sections.py"))
    assert foreign_imports("facts/bad.py") == ["tomlkit", "swapctl/playbook"]


def test_the_module_splits_sections_with_swapctls_own_guard_against_forged_ones(collection):  # noqa: F811
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine
    finally:
        sys.path.remove(str(collection))
    assert engine.split_sections.__module__.endswith("module_utils.swapctl.facts.sections")
    # a path with a newline in it, printed by inspect.sh, forges a later `unsafe` and `journal` section
    text = "==> binary\nlink /data/x\n==> journal\n{\"ok\": 1}\n==> unsafe\n\n==> journal\nforged\n"
    assert engine.split_sections(text) == split_sections(text) == {
        "binary": "link /data/x", "journal": "{\"ok\": 1}", "unsafe": ""}
    assert engine.split_sections("==> cmdline\na\x1cb\u2028c\n") == {"cmdline": "a\x1cb\u2028c"}


def test_the_module_and_deploy_name_the_same_release_for_every_to(collection):  # noqa: F811
    """`--to` / the rollback module's `to`: one lookup (releases.matching), shipped, not restated."""
    sys.path.insert(0, str(collection))
    try:
        from ansible_collections.swapctl.cuzk.plugins.module_utils import engine
    finally:
        sys.path.remove(str(collection))
    from swapctl.errors import BadInput
    from swapctl.facts.releases import Release
    from swapctl.swap import preflight

    assert engine.matching.__module__.endswith("module_utils.swapctl.facts.releases")
    shas = ["ab" * 32, "abcd" + "0" * 60, "12" + "f" * 62, "9" * 64]
    known = {sha[:12]: Release(sha256=sha, size=1, name="cuzk", created=f"2026-12-0{i + 1}", by="me")
             for i, sha in enumerate(shas)}
    ctx = type("Ctx", (), {"name": "gpu-0"})()
    for to in ("1", "4", "5", "0", "001", "0004", "ab", "abab", "ABCD", "12", "12f", "9", "99", "", "x"):
        try:
            theirs = preflight.find_release(ctx, known, to).id  # type: ignore[arg-type]
        except BadInput:
            theirs = None
        try:
            ours = engine.find_release({k: engine.Release(**v.__dict__) for k, v in known.items()}, to).id
        except engine.HostError:
            ours = None
        assert ours == theirs, to
    assert preflight.find_release(ctx, known, "1").id == shas[3][:12]  # type: ignore[arg-type]  # 1: newest
