#!/bin/sh
# The journal of $unit, from after the cursor the last fetch ended at ($cursor; empty: all of it, the first
# time); its last line is `-- cursor: ...`, where the next fetch goes on.
: "${unit?}" "${cursor?}"
if [ -n "$cursor" ]; then exec journalctl -q -o cat --no-pager --show-cursor -u "$unit" --after-cursor="$cursor"
else exec journalctl -q -o cat --no-pager --show-cursor -u "$unit"; fi
