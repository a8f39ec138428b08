"""mkdocs hook: a page's links to the repository's own files outside docs/ (the saved data a figure comes
from, `../tests/data/...`) are checked to exist, so a figure's evidence cannot be linked wrong, and become
plain paths on the built site, which has no copy of the repository. The .md sources keep the links, which
work where the repository is browsed."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

OUTSIDE = re.compile(r"\[([^\]]*)\]\((\.\./[^)\s#]+)(#[^)]*)?\)")


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    docs = Path(config["docs_dir"]).resolve()
    page_dir = (docs / page.file.src_path).parent
    repo = docs.parent

    def plain(m: re.Match) -> str:
        target = (page_dir / m[2]).resolve()
        if not target.exists() or repo not in target.parents:
            raise PluginError(f"{page.file.src_path}: {m[2]} is not a file of the repository")
        path = target.relative_to(repo).as_posix()
        return f"`{path}`" if m[1].strip("`") in (path, m[2]) else f"{m[1]} (`{path}`)"

    return OUTSIDE.sub(plain, markdown)
