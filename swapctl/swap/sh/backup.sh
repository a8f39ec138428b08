#!/bin/sh
# Saves a copy of an executable as a release: a running daemon's /proc/PID/exe (works when its file was
# replaced or deleted), or the plain file at the binary path (a first deploy).
# Inputs: src, dir (the release's directory), name (the file's name in it), manifest (its manifest.json).
: "${src?}" "${dir?}" "${name?}" "${manifest?}"
umask 077
# shellcheck disable=SC2174 # 700 for the release directory itself; its parents exist already
mkdir -p -m 700 -- "$dir" && cp -- "$src" "$dir/.$name.tmp" && chmod 755 "$dir/.$name.tmp" &&
  mv -f -- "$dir/.$name.tmp" "$dir/$name" && printf '%s\n' "$manifest" > "$dir/.manifest.tmp" &&
  mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json"
