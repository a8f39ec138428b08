#!/bin/sh
# A second Ctrl-C: the swap script $pid rolls back at once, wherever the new build's start is. SIGUSR1 tells
# it (its trap notes it), and its readiness wait ends now: its log reader (tail or journalctl, a child of
# the pipeline's subshell, swap.sh's wait_ready) is TERMed. Only a swap script: a pid reused since is left
# alone.
: "${pid?}"
grep -q swapctl-swap "/proc/$pid/cmdline" 2>/dev/null || exit 0
kill -USR1 "$pid" || exit 0
for child in $(pgrep -P "$pid"); do pkill -TERM -P "$child" -x tail; pkill -TERM -P "$child" -x journalctl; done
exit 0
