#!/bin/sh
# What swapctl must know of the host and its running daemon to save it and to start it again exactly as
# it ran. Inputs: pid (empty: no daemon runs), bin (the binary path), state (the state directory);
# arguments: the config files the daemon's arguments name. Prints sections `==> name`.
: "${pid?}" "${bin?}" "${state?}"
# shellcheck source=lib.sh
. ./lib.sh
sec() { printf '\n==> %s\n' "$1"; }
sec arch; uname -m
sec binary
if [ -L "$bin" ]; then echo "link $(readlink -- "$bin")"
elif [ -f "$bin" ]; then echo "file $(sha256 < "$bin")"
else echo missing; fi
sec free; df -P -k -- "$(dirname -- "$bin")" | tail -n 1
sec unsafe; unsafe_dirs "${state%/*}" "$state" "$state/releases"
sec releases
# only directories named as swapctl names them (12 hex digits: no newline, no `/`, no `..` can hide in a
# name), each `NAME<TAB>manifest`; a manifest over 1 MiB is no manifest swapctl wrote (status reads it so
# too): cut, it does not parse
for m in "$state"/releases/*/manifest.json; do
  d=${m%/manifest.json}; d=${d##*/}
  release_id "$d" && [ -f "$m" ] && { printf '%s\t' "$d"; head -c 1048576 -- "$m" | tr -d '\n'; echo; }
done
# the journal's last entries only: the deploy needs the recent ones, and it grows by one a swap
sec journal; tail -n 1000 -- "$state/journal.jsonl" 2>/dev/null | cut -c 1-65536
sec tools; command -v zstd
sec partial
for f in "$state"/releases/.upload-*; do release_id "${f##*/.upload-}" && [ -f "$f" ] && stat -c '%s %n' -- "$f"; done
sec missing; missing "$@"
[ -n "$pid" ] || exit 0
sec exe_sha; sha256 < "/proc/$pid/exe"
sec exe_size; stat -L -c %s "/proc/$pid/exe"
sec cmdline; base64 -w0 < "/proc/$pid/cmdline"; echo
sec environ; base64 -w0 < "/proc/$pid/environ"; echo
sec cwd; readlink -- "/proc/$pid/cwd"
sec cgroup; cat "/proc/$pid/cgroup"
sec pgid; ps -o pgid= -p "$pid" | tr -d ' '
exit 0
