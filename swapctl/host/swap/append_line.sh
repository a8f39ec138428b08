#!/bin/sh
# Appends the line $text to the file at $path (the journal), whole or not at all (lib.sh's append_line).
# Past $cap_bytes it keeps only its last $keep lines (a rename): a journal gains a line every swap and is
# read on every deploy.
: "${path?}" "${text?}" "${keep?}" "${cap_bytes?}"
# shellcheck source=lib.sh
. ./lib.sh
# in the state directory, entered once: a rename of .swapctl meanwhile redirects no write (in_state_tree)
in_state_tree "$path" || { echo "the journal line was not written to $path: $unsafe (not a directory only root may change)" >&2; exit 1; }
append_line "$rel" "$text" "$keep" "$cap_bytes" || { echo "the journal line could not be written to $path (is the disk full?)" >&2; exit 1; }
exit 0
