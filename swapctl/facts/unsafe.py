"""A directory others may write to (lib.sh's unsafe_dirs and unsafe_path print `DIR OWNER MODE`), said in one
line with what to do: the swap's preflight and the GPU sampler refuse on it alike."""

from __future__ import annotations

from pathlib import PurePosixPath


def why_unsafe(line: str, state: str) -> str:
    """`DIR OWNER MODE` from lib.sh's unsafe_dirs or unsafe_path, as one line saying what to do: the state
    tree (`state`, its parent `.swapctl`, releases/) or the binary's directory and those above it."""
    where, owner, mode = ([*line.rsplit(" ", 2), "?", "?"])[:3]
    what = "is no directory" if owner == "not-a-directory" else f"is owned by uid {owner} with mode {mode}"
    if not where.startswith(str(PurePosixPath(state).parent)):
        return (f"directory {where}, the binary's or one above it, {what}: whoever can write there could "
                f"rename the state directory away and put their own in its place, which swapctl then runs as "
                f"root; make it root's and not group- or world-writable (`chown root: {where}; chmod go-w "
                f"{where}`), or name its owner in daemon.user if the daemon's user must own it, then try again")
    return (f"state directory {where} {what}: whoever can write "
            f"there could replace a release or its manifest, which swapctl then runs as root; make it "
            f"root's and not group- or world-writable (`chown root: DIR; chmod 700 DIR`), or remove it "
            f"if nobody you trust made it, then deploy again")
