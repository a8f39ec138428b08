#!/bin/sh
# Replaces the file at $path with the line $text, atomically (a rename); readable by its owner only.
: "${path?}" "${text?}"
umask 077
printf '%s\n' "$text" > "$path.tmp.$$" && mv -f -- "$path.tmp.$$" "$path"
