#!/bin/sh
# An upload where swapctl writes as root (sudo): the bytes after the inputs on stdin go to the file $path,
# as SFTP would write them as the login user. $offset: the bytes it must already hold (a resume; 0: a new file).
# A path in a state tree (BINDIR/.swapctl/NAME/...) is written in that tree, entered once (lib.sh's
# enter_state): the binary's directory may be its daemon's user's, who could rename .swapctl meanwhile.
: "${path?}" "${offset?}"
# shellcheck source=lib.sh
. ./lib.sh
in_state_tree "$path" || { echo "$path not written: $unsafe (not a directory only root may change)" >&2; exit 1; }
umask 077
have=$(stat -c %s -- "$rel" 2>/dev/null || echo 0)
if [ "$offset" = 0 ]; then exec cat > "$rel"; fi
[ "$have" = "$offset" ] || { echo "$path holds $have bytes, not $offset" >&2; exit 1; }
exec cat >> "$rel"
