"""The daemon's environment as it is carried from one start to the next: what is dropped, and what changed.

An adopted daemon's environment (/proc/PID/environ) and a manifest's are read back from the host, where
another user may have had a hand in them. Loader variables (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...)
make any program load code of someone's choosing, so they are never carried over unless the playbook
says so (daemon.keep_loader_env, or daemon.env setting them); a key that is no variable name is never
carried either (`env` took a key starting with `-` as an option). The plan shows both, and the diff."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..masking import MASK, looks_secret
from ..remote.cmd import NAME

# glibc's list of variables it ignores for setuid programs (UNSECURE_ENVVARS), TMPDIR aside
LOADER = re.compile(r"LD_\w*|GCONV_PATH|GETCONF_DIR|HOSTALIASES|LOCALDOMAIN|LOCPATH|MALLOC_TRACE|NIS_PATH|NLSPATH|"
                    r"RESOLV_HOST_CONF|RES_OPTIONS|TZDIR")

Env = tuple[tuple[str, str], ...]


def carried(env: Iterable[tuple[str, str]], keep: Iterable[str]) -> tuple[Env, tuple[tuple[str, str], ...]]:
    """(what is carried over, (name, why) for what is not): no loader variable `keep` does not name, no
    key that is not a variable name."""
    kept, dropped, allowed = [], [], set(keep)
    for k, v in env:
        if not NAME.fullmatch(k):
            dropped.append((k, "not a variable name"))
        elif LOADER.fullmatch(k) and k not in allowed:
            dropped.append((k, "a loader variable: name it in daemon.keep_loader_env to keep it"))
        else:
            kept.append((k, v))
    return tuple(kept), tuple(dropped)


def diff(old: Iterable[tuple[str, str]], new: Iterable[tuple[str, str]], secret: Iterable[str] = ()) -> list[str]:
    """`+K=v`, `-K`, `K: a -> b` for what differs between two environments; secrets as ***."""
    before, after, listed = dict(old), dict(new), set(secret)

    def shown(k: str, v: str) -> str:
        return MASK if k in listed or looks_secret(k, v) else v

    out = [f"+{k}={shown(k, v)}" for k, v in after.items() if k not in before]
    out += [f"-{k}" for k in before if k not in after]
    out += [f"{k}: {shown(k, before[k])} -> {shown(k, v)}" for k, v in after.items() if k in before and before[k] != v]
    return out
