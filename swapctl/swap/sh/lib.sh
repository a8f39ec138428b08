# shellcheck shell=sh
# Functions the host scripts share. A script includes this file by name (`. ./lib.sh`); swapctl puts its
# text in place of that line when it loads the script (scripts.load), as the host has no copy of it.

# sha256 of stdin: openssl uses the CPU's SHA extensions, coreutils' sha256sum does not (0.09 s against
# 0.43 s for 75 MB on the test machine).
sha256() {
  if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r | cut -d' ' -f1
  else sha256sum | cut -d' ' -f1; fi
}

# Prints each of its arguments that names no file: the config files a daemon's command line names.
missing() { for f; do [ -e "$f" ] || printf '%s\n' "$f"; done; }

# Both run in polling loops, so they start no process (a fork and exec cost more CPU than the check).
# alive PID: /proc/PID/stat exists and its state is not Z (a zombie has exited, and `kill -0` would still
# succeed on it where nothing reaps orphans).
alive() { s=; { read -r s < "/proc/$1/stat"; } 2>/dev/null; s=${s##*) }; [ -n "$s" ] && [ "${s%% *}" != Z ]; }
# now: NOW becomes milliseconds on a monotonic clock (/proc/uptime, in 10 ms steps).
now() { read -r NOW _ < /proc/uptime; NOW=$(( ${NOW%.*} * 1000 + 1${NOW#*.} * 10 - 1000 )); }

# json_str TEXT: TEXT as a JSON string (quotes and backslashes escaped, control characters dropped).
json_str() { printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# release_id NAME: whether NAME is a release's directory name as swapctl makes it (12 hex digits)
release_id() { case $1 in *[!0-9a-f]*) return 1 ;; ????????????) return 0 ;; *) return 1 ;; esac; }

# unsafe_dirs DIR...: prints `DIR owner mode` for each existing directory not owned by the user this runs
# as, or writable by its group or others: whoever may write there could swap a release or a manifest, and
# `mkdir -p -m 700` leaves a directory that was there already as it was.
unsafe_dirs() {
  me=$(id -u)
  for d; do
    [ -e "$d" ] || [ -L "$d" ] || continue
    if [ -L "$d" ] || [ ! -d "$d" ]; then printf '%s not-a-directory -\n' "$d"; continue; fi
    info=$(stat -c '%u %a' -- "$d") || continue
    owner=${info% *}; mode=${info#* }
    if [ "$owner" != "$me" ] || [ $(( 0$mode & 022 )) -ne 0 ]; then printf '%s %s %s\n' "$d" "$owner" "$mode"; fi
  done
}
