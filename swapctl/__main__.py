"""The entry point (`swapctl`, `python -m swapctl`). A Ctrl-C while swapctl is still starting (importing typer,
rich and paramiko takes a fifth of a second) ends it with one line and exit 130, nothing done, instead of
Python's traceback; once the CLI is imported its own handler (cli/common.py `CtrlC`, installed by `guarded`)
decides what a press means."""

import os
import signal


def _starting(signum: int, frame: object) -> None:
    os.write(2, b"swapctl: interrupted while starting; nothing was done\n")
    os._exit(130)


def main() -> None:
    early = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not where SIGINT is ignored
    if early:
        signal.signal(signal.SIGINT, _starting)
    from .cli import main as cli_main

    if early:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cli_main()


if __name__ == "__main__":
    main()
