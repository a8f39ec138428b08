#!/bin/bash
# Receives a zstd stream on stdin (a patch against $base when given) and appends it to $tmp, which must
# hold exactly $off bytes (a resumed upload) and $size when complete, then installs it as install.sh does.
# The sha256 is taken as the bytes arrive, the kept prefix first: no second pass over a large file. A
# stream cut between two frames looks complete to zstd, hence the size check; the partial file stays for
# a resume. A full disk removes it at once: the daemon's logs need that space more.
# It is started before the deploy holds the host's lock (Host.prepare), so it touches nothing until its
# first line says GO; EOF instead (the deploy stopped before its upload) ends it. (bash, for pipefail and
# a `read` that takes no byte past its line)
# Inputs: tmp, off, base, size, and install.sh's dir, name, sha, manifest.
# Prints OFFSET have, NOSPACE free_kib, BROKEN why, SHORT have, or what install_release prints.
: "${tmp?}" "${off?}" "${base?}" "${size?}" "${dir?}" "${name?}" "${sha?}" "${manifest?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=release.sh
. ./release.sh
IFS= read -r go && [ "$go" = GO ] || exit 0
in_release_dir || { cat >/dev/null; echo "BROKEN the state directory is not safe to write to: $unsafe"; exit 0; }
set -o pipefail
umask 077
have=$(stat -c %s -- "$tmp" 2>/dev/null || echo 0)
if [ "$off" = 0 ]; then : > "$tmp"
elif [ "$have" != "$off" ]; then cat >/dev/null; echo "OFFSET $have"; exit 0; fi
receive() {  # a patch (never resumed) goes straight to the file, then one sha256 pass: no pipes for 2 copies
  if [ -n "$base" ]; then
    zstd -d -q -c --long=31 --patch-from="$base" 2>/dev/null > "$tmp" && got=$(sha256 < "$tmp")
  else
    got=$( { cat -- "$tmp"; zstd -d -q -c --long=31 | tee -a -- "$tmp"; } 2>/dev/null | sha256)
  fi
}
if ! receive; then
  have=$(stat -c %s -- "$tmp" 2>/dev/null || echo 0)
  free=$(df -P -k -- "$(dirname -- "$tmp")" | awk 'END {print $4}')
  case $free in ''|*[!0-9]*) free= ;; esac  # df failed: say the stream broke, never guess the disk is full
  if [ -n "$free" ] && [ $(( free * 1024 )) -lt $(( size - have )) ]; then rm -f -- "$tmp"; echo "NOSPACE $free"
  else echo "BROKEN the stream ended early or was damaged ($have of $size bytes written)"; fi
  exit 0
fi
have=$(stat -c %s -- "$tmp")
if [ "$have" -lt "$size" ]; then echo "SHORT $have"; exit 0; fi
install_release "$got"
