#!/bin/sh
# $len bytes of file $f from byte $off, compressed with $method (zstd, gzip or none) for fetch-logs.
# Reads what it opened, not what the name says a moment later: the file is opened once, and the path
# /proc/self/fd names must still be the listed one and a regular file (a symlink swapped in meanwhile,
# or a FIFO that would block, is refused).
: "${f?}" "${off?}" "${len?}" "${method?}"
if [ ! -f "$f" ] || [ -L "$f" ]; then echo "$f is no longer a regular file" >&2; exit 3; fi
exec 3< "$f" || exit 3
opened=$(readlink "/proc/$$/fd/3" && echo x); opened=${opened%?x}
if [ "$opened" != "$f" ] || [ ! -f "/proc/$$/fd/3" ]; then echo "$f changed while it was opened" >&2; exit 3; fi
tail -c "+$((off + 1))" <&3 | head -c "$len" | case "$method" in
  zstd) zstd -q -c -3 ;;
  gzip) gzip -1 -c ;;
  *) cat ;;
esac
