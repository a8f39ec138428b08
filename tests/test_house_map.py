"""The house map (docs/contributing.md, "Layout" and "Where to add") is kept true: every package and
top-level module of swapctl/ has its row, every family of host scripts is named in the host row, and every
path the map names is there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = (ROOT / "docs" / "contributing.md").read_text()
LAYOUT = MAP.split("## Layout", 1)[1].split("\n## ", 1)[0]


def test_every_package_and_top_level_module_of_swapctl_has_a_row_in_the_layout():
    pkg = ROOT / "swapctl"
    parts = {f"swapctl/{p.name}/" for p in pkg.iterdir() if (p / "__init__.py").exists()}
    parts |= {f"swapctl/{p.name}" for p in pkg.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    rows = {line.split("|")[1] for line in LAYOUT.splitlines() if line.startswith("| `")}
    listed = {path for row in rows for path in re.findall(r"`(swapctl/[\w./-]+)`", row)}
    assert parts <= listed, f"no row in docs/contributing.md's layout for {sorted(parts - listed)}"


def test_every_family_of_host_scripts_is_named_in_the_host_row():
    [row] = [line for line in LAYOUT.splitlines() if line.startswith("| `swapctl/host/`")]
    families = {p.name for p in (ROOT / "swapctl" / "host").iterdir() if any(p.glob("*.sh"))}
    assert families and all(f"`{f}/`" in row for f in families), (families, row)


def test_every_path_the_map_names_is_there():
    for path in sorted(set(re.findall(r"`((?:swapctl|tests|scripts|images|playbooks|benchmarks)/[\w./-]*)`", MAP))):
        assert (ROOT / path.rstrip("/")).exists(), f"docs/contributing.md names {path}, which is not there"
