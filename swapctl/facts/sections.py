"""The `==> name` sections the host scripts print (status.sh, inspect.sh, launch.sh), split apart. Standard
library only: scripts/build_collection.py ships it to the Ansible modules, which import it as swapctl does."""

from __future__ import annotations


def split_sections(text: str) -> dict[str, str]:
    """A script's `==> name` sections. Lines end at a newline only (str.splitlines would end one at a \\x1c
    or a U+2028 inside a path too), and a section's first occurrence counts: the scripts print each once,
    so a later one is text that forged it."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("==> "):
            name = line[4:].strip()
            current = sections.setdefault(name, []) if name not in sections else []
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in sections.items()}
