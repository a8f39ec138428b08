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
unsafe_dirs() { for d; do unsafe_dir "$d"; done; }

# unsafe_dir DIR [SHOWN]: unsafe_dirs for one directory (a link, or no directory, is `not-a-directory`),
# named SHOWN in what it prints
unsafe_dir() {
  [ -e "$1" ] || [ -L "$1" ] || return 0
  if [ -L "$1" ] || [ ! -d "$1" ]; then printf '%s not-a-directory -\n' "${2:-$1}"; return 0; fi
  info=$(stat -c '%u %a' -- "$1") || return 0
  owner=${info% *}; mode=${info#* }
  if [ "$owner" != "$(id -u)" ] || [ $(( 0$mode & 022 )) -ne 0 ]; then printf '%s %s %s\n' "${2:-$1}" "$owner" "$mode"; fi
}

# enter_state STATE: the cwd becomes the state directory STATE (BINDIR/.swapctl/NAME), entered once (cd -P);
# from then on the script reaches the state tree only by paths relative to it. A process holds its cwd:
# whoever owns the binary's directory (daemon.user may) and renames .swapctl, or puts a link in its place,
# afterwards redirects none of root's writes. Returns 2 when STATE is missing, 1 (`unsafe`: `DIR owner mode`)
# when what was entered is not STATE itself (a link on the way: its real path differs), or it, its parent
# or its releases/ may be changed by someone else. Sets real_bindir, the binary's directory's real path.
enter_state() {
  [ -e "$1" ] || [ -L "$1" ] || [ -L "${1%/*}" ] || { unsafe="$1 missing -"; return 2; }
  unsafe="$1 not-a-directory -"; [ -L "${1%/*}" ] && unsafe="${1%/*} not-a-directory -"
  real_bindir=$(cd -P -- "${1%/.swapctl/*}" 2>/dev/null && pwd -P) && cd -P -- "$1" 2>/dev/null &&
    [ "$(pwd -P)" = "${real_bindir%/}/.swapctl/${1##*/}" ] || return 1
  unsafe=$(unsafe_dir .. "${1%/*}"; unsafe_dir . "$1"; unsafe_dir releases "$1/releases")
  [ -z "$unsafe" ]
}

# make_state STATE: STATE and its releases/ made where missing (700), a level at a time, each made in the level
# above once that was entered and found where it should be and this user's: never `mkdir -p` through a
# directory another user may rename. What it leaves unmade, enter_state refuses.
make_state() (
  mkdir -p -- "${1%/.swapctl/*}" && cd -P -- "${1%/.swapctl/*}" || exit 1
  for d in .swapctl "${1##*/}" releases; do
    up=$(pwd -P); [ -e "$d" ] || [ -L "$d" ] || mkdir -m 700 -- "$d" || exit 1
    cd -P -- "$d" 2>/dev/null && [ "$(pwd -P)" = "${up%/}/$d" ] && [ -z "$(unsafe_dir .)" ] || exit 0
  done
)

# here STATE PATH: PATH, a path inside the state directory STATE that enter_state entered, relative to it;
# fails for any other (or one with a `.` or `..` part)
here() {
  case /$2/ in */../* | */./*) return 1 ;; esac
  case $2 in "$1"/?*) printf '%s\n' "${2#"$1"/}" ;; *) return 1 ;; esac
}

# in_state_tree PATH: for a PATH in a state tree (BINDIR/.swapctl/NAME/...), that tree entered (enter_state)
# and rel set to PATH relative to it; rel is PATH itself for any other. Returns 1 (`unsafe` says why) for a
# tree that is not root's alone or not where it should be.
in_state_tree() {
  rel=$1
  case $1 in */.swapctl/*/?*) ;; *) return 0 ;; esac
  t=${1%/.swapctl/*}; r=${1#"$t"/.swapctl/}
  enter_state "$t/.swapctl/${r%%/*}" || return 1
  # shellcheck disable=SC2034 # rel, unsafe: the caller's
  unsafe="$1 has a . or .. in it" && rel=$(here "$t/.swapctl/${r%%/*}" "$1")
}

# append_line PATH TEXT KEEP CAP_BYTES: TEXT as one line at the end of PATH (the journal), whole or not at
# all: one write (dd from a pipe, one block), and a write the disk cut short is cut back off (truncate needs
# no free space), so a full disk never leaves half a line. A line torn by a crash mid-write earlier gets a
# newline after it first: the reader skips it, and this line stays whole. A disk full to its last byte gets
# back the room PATH.reserve held (64 KiB, made again by a later line once there is room), so that the swap
# that found it full is journaled still. Past CAP_BYTES only the last KEEP lines are kept (a copy, then a
# rename). Returns 1 when the line could not be written.
append_line() {
  before=$(stat -c %s -- "$1" 2>/dev/null || echo 0)
  if [ "$before" -gt 0 ] && [ -n "$(tail -c 1 -- "$1" | tr -d '\n')" ]; then set -- "$1" "
$2" "$3" "$4"; fi
  want=$(( before + $(printf '%s\n' "$2" | wc -c) ))
  if ! append_once "$1" "$2" "$before" "$want"; then
    [ -f "$1.reserve" ] && rm -f -- "$1.reserve" && append_once "$1" "$2" "$before" "$want" || return 1
  fi
  keep_reserve "$1"
  if [ "$want" -gt "$4" ]; then
    { tail -n "$3" -- "$1" > "$1.tmp.$$" && mv -f -- "$1.tmp.$$" "$1"; } 2>/dev/null || rm -f -- "$1.tmp.$$"
  fi
  return 0
}

# keep_reserve PATH: PATH.reserve, the 64 KiB append_line gives back on a full disk, made where it is not;
# none where the disk has not the room (a short one is removed). Returns 1 when there is none.
keep_reserve() {
  [ -f "$1.reserve" ] && return 0
  { (umask 077; head -c 65536 /dev/zero > "$1.reserve") 2>/dev/null && return 0; } || rm -f -- "$1.reserve"
  return 1
}

# append_once PATH TEXT BEFORE WANT: one try of append_line's write; a short one is cut back to BEFORE bytes
append_once() {
  printf '%s\n' "$2" | (umask 077; dd of="$1" oflag=append conv=notrunc bs=4M iflag=fullblock status=none) 2>/dev/null
  [ "$(stat -c %s -- "$1" 2>/dev/null || echo 0)" = "$4" ] && return 0
  [ -e "$1" ] && truncate -s "$3" -- "$1" 2>/dev/null
  return 1
}

# unsafe_path DIR [UID]: prints `D owner mode` for the first of DIR (the binary's directory) and the
# directories above it, as given and with symlinks resolved, that someone other than this user (or UID, the
# daemon's user where the playbook names one) may change: not theirs, or writable by group or others
# without the sticky bit (in a sticky directory only an entry's owner may rename it). Whoever can rename
# DIR, or a directory above it, can put a state tree of their own in place of swapctl's.
unsafe_path() {
  me=$(id -u); also=${2:-$me}
  for p in "$1" "$(readlink -f -- "$1" 2>/dev/null)"; do
    while [ -n "$p" ]; do
      if [ ! -L "$p" ] && info=$(stat -c '%u %a' -- "$p" 2>/dev/null); then
        owner=${info% *}; mode=${info#* }
        if { [ "$owner" != "$me" ] && [ "$owner" != "$also" ]; } ||
           { [ $(( 0$mode & 022 )) -ne 0 ] && [ $(( 0$mode & 01000 )) -eq 0 ]; }; then
          printf '%s %s %s\n' "$p" "$owner" "$mode"; return 0
        fi
      fi
      [ "$p" = / ] && break
      p=${p%/*}; p=${p:-/}
    done
  done
}

# tool NAME: NAME's path in the system's own directories. What root runs is never looked up on a PATH
# someone else had a hand in: the daemon's recorded PATH is its user's, who may put a `setpriv` there.
tool() {
  for d in /usr/sbin /usr/bin /sbin /bin; do [ -f "$d/$1" ] && [ -x "$d/$1" ] && { printf '%s\n' "$d/$1"; return 0; }; done
  return 1
}
