"""Who is a fork a daemon left, not a daemon. Standard library only: scripts/build_collection.py ships it to
the Ansible modules, which apply the same rule to the processes they read."""

from __future__ import annotations

# a daemon this young on one thread may still be starting, where whether it ran exec is not known: cuzk's
# runtime threads come up in its first milliseconds
LEFTOVER_AFTER_S = 0.5


def is_leftover(threads: int | None, elapsed_s: float, forked: bool | None = None) -> bool:
    """Whether a process that runs the binary, with `threads` threads `elapsed_s` after it started, is a fork
    its daemon left: one thread, and a fork that never ran exec (`forked`: PF_FORKNOEXEC in its
    /proc/PID/stat flags, which exec clears), or where that is not known (None), one thread for
    LEFTOVER_AFTER_S or more (`threads` None: not read, so a daemon as before). cuzk is a tokio program: its
    runtime's threads exist before its first line (`#[tokio::main]`, cuzk-daemon/src/main.rs:33 at curio
    e0294b0f), it never forks to daemonize, and it forks only to run nvidia-smi (cuzk-core/src/engine.rs:1168),
    so a cuzk on one thread that never ran exec is a fork of one, which carries its command line and binary and
    may outlive it (a memory holder, left when the daemon was killed), however young: a daemon killed 0.3 s
    after its start leaves one 0.3 s old. A dying daemon is none: the kernel drops its command line and binary
    before it frees its memory (kernel/exit.c exit_mm), so no reading takes it for the daemon."""
    if threads != 1:
        return False
    return forked if forked is not None else elapsed_s >= LEFTOVER_AFTER_S
