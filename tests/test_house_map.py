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
    roots = "swapctl|tests|scripts|images|playbooks|benchmarks|ansible_collections"
    for path in sorted(set(re.findall(rf"`((?:{roots})/[\w./-]*)`", MAP))):
        assert (ROOT / path.rstrip("/")).exists(), f"docs/contributing.md names {path}, which is not there"


def banned(path: str, line: str) -> list[str]:
    """The TID251 findings `ruff check` makes of `line` as if it were in `path` (its folder's ruff.toml)."""
    import subprocess
    import sys

    ruff = Path(sys.executable).parent / "ruff"
    r = subprocess.run([str(ruff), "check", "--select", "TID251", "--output-format", "concise", "--stdin-filename",
                        path, "-"], input=line + "\n", capture_output=True, text=True, cwd=ROOT)
    return [x for x in r.stdout.splitlines() if "TID251" in x]


def test_the_layouts_rules_are_what_the_linter_holds():
    """issue 46: "what may I touch" is answered by `bash scripts/lint` (ruff's banned-api, swapctl/**/ruff.toml):
    a layer that imports one above it, or a library that is another layer's, fails the lint."""
    for path, line in (("swapctl/remote/x.py", "from ..swap import plan"), ("swapctl/swap/x.py", "import rich"),
                       ("swapctl/playbook/x.py", "from ..remote import Host"), ("swapctl/facts/x.py", "import typer"),
                       ("swapctl/host/x.py", "from ..playbook import Playbook"), ("swapctl/gpu/x.py", "import docker"),
                       ("swapctl/swap/x.py", "from ..experiment import run"),
                       ("swapctl/gpu/x.py", "from ..swap.preflight import why_unsafe"),
                       ("swapctl/logs/cuzk/x.py", "from ...swap.plan import Plan"),
                       ("swapctl/swap/x.py", "from ..gpu.sampler import start_sampler"),
                       ("swapctl/canary.py", "from .cli import app"),
                       ("swapctl/remote/x.py", "from ..playbook import load"),
                       ("swapctl/facts/x.py", "from ..playbook.inventory import read_inventory"),
                       ("swapctl/facts/x.py", "from ..playbook import resolve_host"),
                       ("swapctl/logs/x.py", "from ..playbook.schema import Loader")):
        assert banned(path, line), (path, line)
    for path, line in (("swapctl/cli/x.py", "import rich"), ("swapctl/remote/x.py", "import paramiko"),
                       ("swapctl/build/x.py", "import docker"), ("swapctl/logs/x.py", "import matplotlib"),
                       ("swapctl/swap/x.py", "from ..facts import status"),
                       ("swapctl/logs/cuzk/x.py", "from ...facts.journal_entry import starts"),
                       ("swapctl/remote/x.py", "from ..playbook.spec import HostSpec"),
                       ("swapctl/facts/x.py", "from ..playbook import DaemonSpec"),
                       ("tests/x.py", "import rich")):
        assert not banned(path, line), (path, line)
