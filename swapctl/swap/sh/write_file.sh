#!/bin/sh
# Replaces the file at $path with the line $text, atomically (a rename).
: "${path?}" "${text?}"
printf '%s\n' "$text" > "$path.tmp.$$" && mv -f -- "$path.tmp.$$" "$path"
