#!/bin/sh
# Saves a copy of an executable as a release: a running daemon's /proc/PID/exe (works when its file was
# replaced or deleted), or the plain file at the binary path (a first deploy).
# Inputs: src, dir (the release's directory), name (the file's name in it), manifest (its manifest.json).
# Prints GONE (and exits 0) when src is a /proc/PID/exe whose process has exited meanwhile.
: "${src?}" "${dir?}" "${name?}" "${manifest?}"
# shellcheck source=lib.sh
. ./lib.sh
state=${dir%/releases/*}  # entered once: a rename of .swapctl meanwhile redirects no write (enter_state)
if ! enter_state "$state" || ! dir=$(here "$state" "$dir"); then echo "backup: $dir: ${unsafe:-outside the state directory}" >&2; exit 1; fi
umask 077
# shellcheck disable=SC2174 # 700 for the release directory itself; its parents exist already
mkdir -p -m 700 -- "$dir" || exit 1
# cp's complaint is kept in memory: a file for it on a full disk would hold nothing
if ! err=$(cp -- "$src" "$dir/.$name.tmp" 2>&1); then
  rm -f -- "$dir/.$name.tmp"
  case $src in /proc/*/exe) if [ ! -e "${src%/exe}" ] || [ ! -e "$src" ]; then
    rmdir -- "$dir" 2>/dev/null; echo GONE; exit 0; fi ;; esac
  printf '%s\n' "$err" >&2; rmdir -- "$dir" 2>/dev/null; exit 1
fi
# both files are written before either is renamed (a rename takes no space): a disk that fills meanwhile
# leaves no binary without its manifest, and no temporary behind
if ! { printf '%s\n' "$manifest" > "$dir/.manifest.tmp" && chmod 755 "$dir/.$name.tmp"; }; then
  echo "backup: the manifest could not be written beside the copy" >&2
  rm -f -- "$dir/.$name.tmp" "$dir/.manifest.tmp"; rmdir -- "$dir" 2>/dev/null; exit 1
fi
mv -f -- "$dir/.$name.tmp" "$dir/$name" && mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json"
