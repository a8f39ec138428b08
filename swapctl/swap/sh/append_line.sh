#!/bin/sh
# Appends the line $text to the file at $path (the journal). Past $cap_bytes it keeps only its last
# $keep lines (a rename): a journal gains a line every swap and is read on every deploy.
: "${path?}" "${text?}" "${keep?}" "${cap_bytes?}"
umask 077
printf '%s\n' "$text" >> "$path" || exit 1
size=$(stat -c %s -- "$path" 2>/dev/null || echo 0)
if [ "$size" -gt "$cap_bytes" ]; then
  tail -n "$keep" -- "$path" > "$path.tmp.$$" && mv -f -- "$path.tmp.$$" "$path"
fi
exit 0
