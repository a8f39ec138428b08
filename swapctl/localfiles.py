"""Files swapctl writes on the controller (export-ansible's inventory and secrets, fetch-logs' record): only in
directories of the invoking user that nobody else can write, each file made new under a name of its own
(O_CREAT|O_EXCL|O_NOFOLLOW) and renamed into place, so nothing another user of the controller made first (a
directory, a file, a link) is ever written through."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
from collections.abc import Iterator
from pathlib import Path

from .errors import BadInput

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def own_dir(path: Path, *below: str) -> Iterator[int]:
    """A descriptor of `path`/`below`..., each level made (0755) where missing and checked: the invoking user's,
    not group- or world-writable; else BadInput naming the directory and its owner, before anything is
    written. `path` is the user's word (a link there is followed); a link below it is refused."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(path, _DIR)
    except OSError as exc:
        raise BadInput(f"cannot make or open the directory {path}: {exc.strerror}; pick another") from None
    where = path
    try:
        _check(fd, where)
        for name in below:
            where = where / name
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            try:
                sub = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise BadInput(f"cannot open the directory {where}: {exc.strerror} (a link or no directory: "
                               f"swapctl follows none there); move it away") from None
            os.close(fd)
            fd = sub
            _check(fd, where)
        yield fd
    finally:
        os.close(fd)


def _check(fd: int, where: Path) -> None:
    st = os.fstat(fd)
    me = os.geteuid()
    if st.st_uid != me or st.st_mode & 0o022:
        owner = _user(st.st_uid)
        raise BadInput(f"{where} is {owner}'s, mode {st.st_mode & 0o7777:o}: swapctl writes only into a directory "
                       f"of yours ({_user(me)}) that nobody else can write; pick another, or "
                       f"`chown {_user(me)} {where}; chmod go-w {where}` if it is yours to take")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def write_new(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """`data` as `name` in the directory `dir_fd`: written into a file made new under a name of its own, then
    renamed over `name` (whatever `name` was, a link too, is replaced, never written through)."""
    tmp = f"{name}.{secrets.token_hex(6)}.tmp" if name.startswith(".") else f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, _NEW, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # the umask's bits too: the mode is the caller's word
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
