"""The example playbooks in playbooks/ (shipped in the package as swapctl/playbooks): for
`swapctl init --example NAME`, and the sandbox's own playbook."""

from __future__ import annotations

from pathlib import Path
from string import Template

from ..errors import BadInput

EXAMPLES = Path(__file__).resolve().parent.parent / "playbooks"


def names() -> list[str]:
    return sorted(p.stem for p in EXAMPLES.glob("*.toml"))


def render(name: str, **values: str) -> str:
    """The example's text; `values` fill its ${NAME} placeholders (the sandbox's directory and port)."""
    path = EXAMPLES / f"{name}.toml"
    if not path.is_file():
        raise BadInput(f"no example playbook {name!r}; the examples: {', '.join(names())}")
    return Template(path.read_text(encoding="utf-8")).safe_substitute(values)
