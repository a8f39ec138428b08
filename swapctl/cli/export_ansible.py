"""`swapctl export-ansible DIR`: the playbook's hosts and daemon as an Ansible inventory with group_vars."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from ..errors import BadInput
from ..localfiles import own_dir, write_new
from ..playbook import export
from .common import PlaybookOpt, RootOptions, guarded, load_playbook, out, root


def export_ansible(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="Where inventory.ini and group_vars/ go.")],
    playbook: PlaybookOpt = None,
    group: Annotated[str, typer.Option("--group", help="The Ansible group of every host.")] = "cuzk",
) -> None:
    """Write the playbook's hosts and daemon as an Ansible inventory with group_vars (swapctl.cuzk)."""
    guarded(lambda: _export(directory, playbook, group, root(ctx)))


def _export(directory: str, playbook_path: str | None, group: str, opts: RootOptions) -> int:
    book = load_playbook(playbook_path, opts)
    book.require_daemon()
    if not export.GROUP.fullmatch(group):
        raise BadInput(f"--group {group!r} is not an Ansible group name (letters, digits and _, not first a digit)")
    if not book.hosts:
        raise BadInput(f"{book.path}: no hosts to export; add [hosts.NAME] tables (or an inventory)")
    root = Path(directory)
    variables, secrets = export.group_vars(book)
    head = f"# written by swapctl export-ansible from {book.path}: the swapctl.cuzk modules take these\n"
    files = [("", "inventory.ini", export.inventory(book, group), 0o644),
             (f"group_vars/{group}", "swapctl.yml", head + yaml.safe_dump(variables, sort_keys=False), 0o644)]
    if secrets:  # only its owner reads it; `ansible-vault encrypt` it before it goes anywhere
        files.append((f"group_vars/{group}", "secrets.yml", "# the daemon's secret_env values and Curio's database "
                      "variables: ansible-vault encrypt this file\n" + yaml.safe_dump(secrets), 0o600))
    # both directories checked before anything is written: one another user made is named, never written into
    with own_dir(root) as top, own_dir(root, "group_vars", group) as below:
        for where, name, body, mode in files:
            try:
                write_new(below if where else top, name, body.encode(), mode)
            except OSError as exc:
                raise BadInput(f"cannot write {root / where / name}: {exc.strerror} (pick another DIR)") from None
    written = [f"{where}/{name}" if where else name for where, name, _, _ in files]
    out.print(f"wrote {', '.join(str(root / w) for w in written)}", markup=False, highlight=False)
    return 0
