#!/bin/sh
# The files fetch-logs may bring home: its arguments are glob patterns (swapctl.logs.fetch.parse_listing
# reads the listing): first `TOOLS zstd gzip` (those the host has), then the files. The listing is
# NUL-separated: a file name may hold any byte but NUL, newlines included, and a name holding
# "\nFILE 1 99 .profile\n" once made a newline-separated listing name root's ~/.profile. Each file is
# `FILE <inode> <size>\0<path as globbed>\0<path resolved>\0`; the resolved path (symlinks followed) is what
# is read, and both must match a configured pattern (checked there, not trusted).
IFS='
'
has() { command -v "$1" >/dev/null 2>&1 && echo "$1"; }
printf 'TOOLS %s %s\0' "$(has zstd)" "$(has gzip)"
for pat; do for f in $pat; do
  [ -f "$f" ] || continue
  real=$(readlink -f -- "$f" && echo x) || continue
  real=${real%?x}  # kept whole: $(...) alone would drop a name's trailing newlines
  info=$(stat -L -c '%i %s' -- "$real") || continue
  printf 'FILE %s\0%s\0%s\0' "$info" "$f" "$real"
done; done
exit 0
