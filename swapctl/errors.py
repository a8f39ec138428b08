"""One root error type; each subclass carries the exit code scripts rely on (see README, Exit codes)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # an error swapctl has no better code for
    BAD_INPUT = 2  # playbook, arguments, a binary that can never run there
    REFUSED = 3  # refused before anything changed on a host
    ROLLED_BACK = 4  # the change failed and the previous daemon runs again
    UNKNOWN_STATE = 5  # a host is in an unknown or daemon-less state
    NO_VERDICT = 6  # an experiment ran, but a side made too few proofs to judge: no verdict


class SwapctlError(Exception):
    """An error with a one-line message that says what happened and what to do next."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, *, host: str | None = None, detail: str = ""):
        super().__init__(message)
        self.message = message
        self.host = host
        self.detail = detail  # extra lines (a log tail) shown below the message

    def __str__(self) -> str:
        return f"{self.host}: {self.message}" if self.host else self.message


class BadInput(SwapctlError):
    exit_code = ExitCode.BAD_INPUT


class PlaybookError(BadInput):
    """A playbook that cannot be used; the message names the file, the line where known, and the key."""

    def __init__(self, path: str, message: str, *, line: int | None = None, key: str | None = None):
        where = f"{path}:{line}" if line else str(path)
        text = f"{where}: {key}: {message}" if key else f"{where}: {message}"
        super().__init__(text)
        self.path, self.line, self.key = path, line, key


class Refused(SwapctlError):
    exit_code = ExitCode.REFUSED


class Unreachable(Refused):
    pass


class HostKeyError(Refused):
    pass


class UnknownHostKey(HostKeyError):
    """A host key seen for the first time under host_key_policy = "strict": `seen` says which key, for which
    host; the message adds what to do (a caller with other advice, init before any playbook, uses `seen`)."""

    def __init__(self, seen: str, advice: str, *, host: str | None = None):
        super().__init__(f"{seen}; {advice}", host=host)
        self.seen = seen


class LockHeld(Refused):
    pass


class RemoteCommandFailed(SwapctlError):
    """A remote command exited non-zero: carries the command, its exit code and the tail of its output."""

    def __init__(self, host: str, command: str, exit_code: int, output_tail: str, hint: str = ""):
        tail = output_tail.strip().splitlines()[-1:] or [""]
        message = f"`{command}` exited {exit_code}" + (f": {tail[0]}" if tail[0] else "")
        if hint:
            message += f" ({hint})"
        super().__init__(message, host=host, detail=output_tail)
        self.command, self.status, self.output_tail = command, exit_code, output_tail


class RemoteTimeout(SwapctlError):
    pass


class RemoteOutputTooLarge(SwapctlError):
    """A host sent more than swapctl reads back from that command: a line or an output past its cap."""


class RolledBack(SwapctlError):
    exit_code = ExitCode.ROLLED_BACK


class UnknownState(SwapctlError):
    exit_code = ExitCode.UNKNOWN_STATE
