#!/bin/sh
# How process $pid was started, for `swapctl init --from HOST` (swapctl.facts.launch parses it): sections
# argv, stdout, cwd, ready. Its argv, its stdout's and its cwd's paths are any user's text: each item ends in
# NUL and tr swaps NUL and newline, so an item is one line and a newline in it a NUL (none holds one),
# swapped back by the parser. A section named again later (a log line `==> cwd`) is forged: split_sections
# keeps the first.
: "${pid?}"
printf '==> argv\n'; tr '\n\0' '\0\n' < "/proc/$pid/cmdline"
printf '\n==> stdout\n'; readlink -z "/proc/$pid/fd/1" | tr '\n\0' '\0\n'
printf '==> cwd\n'; readlink -z "/proc/$pid/cwd" | tr '\n\0' '\0\n'
printf '==> ready\n'
log=$(readlink "/proc/$pid/fd/1")
case $log in /*) [ -f "$log" ] && grep -a -m 5 -i -E 'ready|listening|serving' -- "$log";; esac
exit 0
