#!/bin/sh
# The last $lines lines of the file at $path after byte $offset (a failed daemon's log). With path
# "journal": the journal's lines of the unit's start $inv (its InvocationID), else of $unit. journald
# takes a moment to read what an exited process wrote: `journalctl --sync` waits for it (as root), and
# without root the lines of $inv are awaited up to 2 s. A daemon that exits at once has lines with the unit's
# name and no InvocationID (swap.sh's failed_tail): without lines of $inv, the unit's last lines.
: "${path?}" "${offset?}" "${lines?}" "${unit?}" "${inv?}"
if [ "$path" != journal ]; then tail -c "+$(( offset + 1 ))" -- "$path" 2>/dev/null | tail -n "$lines"; exit 0; fi
synced=0; journalctl --sync 2>/dev/null && synced=1
[ -z "$inv" ] && { journalctl -q -o cat -n "$lines" -u "$unit" 2>/dev/null; exit 0; }
n=0
until [ "$synced" = 1 ] || [ -n "$(journalctl -q -o cat -n 1 _SYSTEMD_INVOCATION_ID="$inv" 2>/dev/null)" ] || [ "$n" -ge 40 ]; do
  n=$((n + 1)); sleep 0.05
done
got=$(journalctl -q -o cat -n "$lines" _SYSTEMD_INVOCATION_ID="$inv" 2>/dev/null)
if [ -n "$got" ]; then printf '%s\n' "$got"; else journalctl -q -o cat -n "$lines" -u "$unit" 2>/dev/null; fi
exit 0
