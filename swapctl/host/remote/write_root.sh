#!/bin/sh
# An upload where swapctl writes as root (sudo): the bytes after the inputs on stdin go to the file $path,
# as SFTP would write them as the login user. $offset: the bytes it must already hold (a resume; 0: a new file).
: "${path?}" "${offset?}"
umask 077
have=$(stat -c %s -- "$path" 2>/dev/null || echo 0)
if [ "$offset" = 0 ]; then exec cat > "$path"; fi
[ "$have" = "$offset" ] || { echo "$path holds $have bytes, not $offset" >&2; exit 1; }
exec cat >> "$path"
