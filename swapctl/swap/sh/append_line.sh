#!/bin/sh
# Appends the line $text to the file at $path (the journal).
: "${path?}" "${text?}"
printf '%s\n' "$text" >> "$path"
