#!/bin/sh
# The last $lines lines of the file at $path after byte $offset (a failed daemon's log). With path
# "journal": the journal's lines of the unit's start $inv (its InvocationID), else of $unit. journald
# takes a moment to read what an exited process wrote: the lines of $inv are awaited up to 2 s.
: "${path?}" "${offset?}" "${lines?}" "${unit?}" "${inv?}"
if [ "$path" != journal ]; then tail -c "+$(( offset + 1 ))" -- "$path" 2>/dev/null | tail -n "$lines"; exit 0; fi
[ -z "$inv" ] && { journalctl -q -o cat -n "$lines" -u "$unit" 2>/dev/null; exit 0; }
n=0
until [ -n "$(journalctl -q -o cat -n 1 _SYSTEMD_INVOCATION_ID="$inv" 2>/dev/null)" ] || [ "$n" -ge 40 ]; do
  n=$((n + 1)); sleep 0.05
done
journalctl -q -o cat -n "$lines" _SYSTEMD_INVOCATION_ID="$inv" 2>/dev/null
exit 0
