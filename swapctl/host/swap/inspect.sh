#!/bin/sh
# What swapctl must know of the host and its running daemon to save it and to start it again exactly as
# it ran. Inputs: pid (empty: no daemon runs), bin (the binary path), state (the state directory);
# arguments: the config files the daemon's arguments name. Prints sections `==> name`.
: "${pid?}" "${bin?}" "${state?}" "${user?}"
# shellcheck source=lib.sh
. ./lib.sh
sec() { printf '\n==> %s\n' "$1"; }
sec arch; uname -m
sec binary
if [ -L "$bin" ]; then echo "link $(readlink -- "$bin")"
elif [ -f "$bin" ]; then echo "file $(sha256 < "$bin")"
else echo missing; fi
sec free; df -P -k -- "$(dirname -- "$bin")" | tail -n 1
sec unsafe
unsafe_path "${state%/.swapctl/*}" "$( [ -n "$user" ] && id -u -- "$user" 2>/dev/null)"
unsafe_dirs "${state%/*}" "$state" "$state/releases"
sec releases
# only directories named as swapctl names them (12 hex digits: no newline, no `/`, no `..` can hide in a
# name), each `NAME<TAB>manifest`; a manifest over 1 MiB is no manifest swapctl wrote (status reads it so
# too): cut, it does not parse. A release the swap script marked bad (its `bad` link, made where the manifest
# could not be rewritten: a full disk) ends its line with a tab and `bad`.
for m in "$state"/releases/*/manifest.json; do
  d=${m%/manifest.json}; d=${d##*/}
  release_id "$d" && [ -f "$m" ] && { printf '%s\t' "$d"; head -c 1048576 -- "$m" | tr -d '\n\t'
    [ -L "${m%/*}/bad" ] && printf '\tbad'; echo; }
done
# the journal's last entries only: the deploy needs the recent ones, and it grows by one a swap
sec journal; tail -n 1000 -- "$state/journal.jsonl" 2>/dev/null | cut -c 1-65536
sec tools; command -v zstd
sec partial
for f in "$state"/releases/.upload-*; do release_id "${f##*/.upload-}" && [ -f "$f" ] && stat -c '%s %n' -- "$f"; done
sec missing; missing "$@"
[ -n "$pid" ] || exit 0
# the daemon the status saw may have exited since, by itself: say so, not an empty sha256
[ -e "/proc/$pid/exe" ] || { sec gone; echo "$pid"; exit 0; }
sec exe_sha; sha256 < "/proc/$pid/exe"
sec exe_size; stat -L -c %s "/proc/$pid/exe"
sec cmdline; base64 -w0 < "/proc/$pid/cmdline"; echo
sec environ; base64 -w0 < "/proc/$pid/environ"; echo
# its cwd is its user's path: NUL-terminated, NUL and newline swapped (one line; plan.read_daemon swaps back)
sec cwd; readlink -z -- "/proc/$pid/cwd" | tr '\n\0' '\0\n'
sec cgroup; cat "/proc/$pid/cgroup"
sec pgid; ps -o pgid= -p "$pid" | tr -d ' '
exit 0
