#!/bin/sh
# Runs its arguments (a command line) after saying on stderr which session it runs in: sshd starts each
# session's shell with setsid, so this shell's pid, kept by `exec`, is the session end_session.sh kills.
echo "swapctl-session $$" >&2; exec "$@"
