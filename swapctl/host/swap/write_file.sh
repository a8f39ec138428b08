#!/bin/sh
# Replaces the file at $path with the line $text, atomically (a rename); readable by its owner only.
: "${path?}" "${text?}"
# shellcheck source=lib.sh
. ./lib.sh
# a file of a state tree (a release's manifest) is written in that tree, entered once (in_state_tree)
in_state_tree "$path" || { echo "$path not written: $unsafe (not a directory only root may change)" >&2; exit 1; }
umask 077
printf '%s\n' "$text" > "$rel.tmp.$$" && mv -f -- "$rel.tmp.$$" "$rel"
