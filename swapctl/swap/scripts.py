"""The remote halves of the swap steps: fixed scripts, every value passed as a positional parameter.

Each script prints machine-readable lines (`WORD args...`) that the local side parses. A process is
alive when /proc/PID/stat exists and its state is not Z: a zombie has exited (and `kill -0` would
still succeed on it where nothing reaps orphans).
"""

from __future__ import annotations

from ..remote import Cmd, Piece

# sha256 of stdin: openssl uses the CPU's SHA extensions, coreutils' sha256sum does not (0.09 s against
# 0.43 s for 75 MB on the test machine).
SHA256 = r"""
sha256() { if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r | cut -d' ' -f1
           else sha256sum | cut -d' ' -f1; fi; }
"""

# Prints each of its arguments that names no file: the config files a daemon's command line names.
MISSING = r"""
missing() { for f; do [ -e "$f" ] || printf '%s\n' "$f"; done; }
"""
CHECK_FILES = MISSING + r"""
missing "$@"
"""

# Both run in polling loops, so they start no process (a fork and exec cost more CPU than the check).
# now: NOW becomes milliseconds on a monotonic clock (/proc/uptime, in 10 ms steps).
ALIVE = r"""
alive() { s=; { read -r s < "/proc/$1/stat"; } 2>/dev/null; s=${s##*) }; [ -n "$s" ] && [ "${s%% *}" != Z ]; }
now() { read -r NOW _ < /proc/uptime; NOW=$(( ${NOW%.*} * 1000 + 1${NOW#*.} * 10 - 1000 )); }
"""

# Holds the host's deploy lock for as long as this command's stdin stays open: the lock dies with the
# SSH connection, so a killed swapctl never leaves a stale lock.
LOCK = r"""
dir=$1; info=$2
# a full or read-only disk: say so (a failed `exec 9>>` would end the shell without a word)
why=$(mkdir -p -m 700 -- "$dir" "$dir/releases" 2>&1 && true 2>&1 >>"$dir/lock") ||
  { echo "FAILED $why" | head -n 1; exit 0; }
exec 9>>"$dir/lock"
if flock -n 9; then
  # a swap whose deploy lost its connection runs on (SWAP holds swap.lock): never start another beside it
  if ! flock -n "$dir/swap.lock" true; then echo SWAPPING; exit 0; fi
  printf '%s\n' "$info" > "$dir/lock.info"
  echo LOCKED
  exec cat >/dev/null
fi
printf 'HELD %s\n' "$(cat -- "$dir/lock.info" 2>/dev/null)"
"""

# What swapctl must know of the running daemon to save it and to start it again exactly as it ran.
INSPECT = SHA256 + MISSING + r"""
pid=$1; bin=$2; state=$3; shift 3  # then config files the daemon's arguments name
sec() { printf '\n==> %s\n' "$1"; }
sec arch; uname -m
sec binary
if [ -L "$bin" ]; then echo "link $(readlink -- "$bin")"
elif [ -f "$bin" ]; then echo "file $(sha256 < "$bin")"
else echo missing; fi
sec free; df -P -k -- "$(dirname -- "$bin")" | tail -n 1
sec releases
for m in "$state"/releases/*/manifest.json; do [ -f "$m" ] && { tr -d '\n' < "$m"; echo; }; done
sec journal; cat -- "$state/journal.jsonl" 2>/dev/null
sec tools; command -v zstd
sec partial; for f in "$state"/releases/.upload-*; do [ -f "$f" ] && stat -c '%s %n' -- "$f"; done
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
"""

# Saves a copy of a running daemon's executable (works when its file was replaced or deleted).
SAVE_RUNNING = r"""
pid=$1; dir=$2; name=$3; manifest=$4
mkdir -p -m 700 -- "$dir" && cp -- "/proc/$pid/exe" "$dir/.$name.tmp" && chmod 755 "$dir/.$name.tmp" &&
mv -f -- "$dir/.$name.tmp" "$dir/$name" && printf '%s\n' "$manifest" > "$dir/.manifest.tmp" &&
mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json"
"""

# Saves the file at the binary path itself (first deploy, when it is a plain file).
SAVE_FILE = r"""
src=$1; dir=$2; name=$3; manifest=$4
mkdir -p -m 700 -- "$dir" && cp -- "$src" "$dir/.$name.tmp" && chmod 755 "$dir/.$name.tmp" &&
mv -f -- "$dir/.$name.tmp" "$dir/$name" && printf '%s\n' "$manifest" > "$dir/.manifest.tmp" &&
mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json"
"""

# Turns a verified upload into a release: checks its sha256, then renames it into place.
INSTALL = SHA256 + r"""
tmp=$1; dir=$2; name=$3; sha=$4; manifest=$5; got=${6:-}  # $6: its sha256, when taken on the way in
[ -n "$got" ] || got=$(sha256 < "$tmp")
if [ "$got" != "$sha" ]; then rm -f -- "$tmp"; echo "MISMATCH $got"; exit 0; fi
chmod 755 "$tmp" && mkdir -p -m 700 -- "$dir" && mv -f -- "$tmp" "$dir/$name" &&
printf '%s\n' "$manifest" > "$dir/.manifest.tmp" && mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json" &&
echo INSTALLED
# its shared libraries must resolve here, before anything stops
ldd -- "$dir/$name" 2>&1 | grep 'not found' | sed 's/^[[:space:]]*/MISSING /'
exit 0
"""

# Receives a zstd stream on stdin (a patch against $3 when given) and appends it to $1, which must hold
# exactly $2 bytes (a resumed upload) and $4 when complete, then installs it as INSTALL does with the
# arguments after $4. The sha256 is taken as the bytes arrive, the kept prefix first: no second pass
# over a large file. A stream cut between two frames looks complete to zstd, hence the size check; the
# partial file stays for a resume. A full disk removes it at once: the daemon's logs need that space more.
# It is started before the deploy holds the host's lock (Host.prepare), so it touches nothing until its
# first line says GO; EOF instead (the deploy stopped before its upload) ends it. (bash, for pipefail
# and a `read` that takes no byte past its line)
RECEIVE = SHA256 + r"""
IFS= read -r go && [ "$go" = GO ] || exit 0
tmp=$1; off=$2; base=$3; size=$4; shift 4
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
set -- "$tmp" "$@" "$got"
""" + INSTALL

FREE_KIB = r"""
df -P -k -- "$(dirname -- "$1")" | awk 'END {print $4}'
"""

WRITE_FILE = r"""
printf '%s\n' "$2" > "$1.tmp.$$" && mv -f -- "$1.tmp.$$" "$1"
"""

APPEND_LINE = r"""
printf '%s\n' "$2" >> "$1"
"""

REMOVE_RELEASE = r"""
for d in "$@"; do rm -rf -- "$d"; done
"""

# The swap itself, as one script on one channel: no round trip between the old daemon's exit and the
# new one's start, whatever the host's shell start-up costs (a .bashrc running `conda init` is common).
# Each stage is a function; the script streams what happens:
#   KIDS pids | SIGKILL | STOPPED ms          stop: SIGTERM (its process group too when it leads one),
#                                             SIGKILL after the grace period; descendants noted first
#   R ms avail_kib alive gpu_used | DONE ms | TIMEOUT ms
#                                             wait until they are gone, GPU memory is back, MemAvailable >= min
#   STARTED pid log_offset                    the binary path points at the release; started with env -i
#   LOG line | READY | EXITED | ALIVE 0/1     the log after the start until ready, exit or time-out
#   WATCH ms                                  ready: watched for ms more, as it must stay up that long
#   NOTREADY                                  not ready; when this line finds nobody listening any more,
#                                             the host goes back to the fallback release by itself
# Arguments: pid grace_ms group unit | timeout_ms min_kib gpu_max | bin target | cwd log | re ready_s port
#            | fb_target fb_cwd fb_command fb_journal | stable_ms | K=V... command...   (an empty pid skips the stop;
#            an empty fb_target: no fallback; fb_command is a rendered Cmd, fb_journal a JSON object
#            without its closing brace)
# stop_daemon pid grace_ms group unit: SIGTERM, SIGKILL after the grace period; prints KIDS, SIGKILL, STOPPED.
STOP_DAEMON = ALIVE + r"""
stop_daemon() {
  pid=$1; grace_ms=$2; group=$3; unit=$4
  kids=$(ps -eo pid=,ppid= | awk -v root="$pid" '{p[$1]=$2} END {for (x in p) {y=p[x]; while (y in p && y != root && y > 1) y=p[y]; if (y == root) printf "%s ", x}}')
  echo "KIDS $kids"
  now; start=$NOW
  if [ -n "$unit" ]; then systemctl stop -- "$unit" 2>&1 | sed 's/^/LOG /'; fi
  kill -TERM "$pid" 2>/dev/null
  [ "$group" = 1 ] && kill -TERM -- "-$pid" 2>/dev/null
  while alive "$pid"; do
    now
    if [ $(( NOW - start )) -ge "$grace_ms" ]; then
      echo SIGKILL
      kill -KILL "$pid" 2>/dev/null
      [ "$group" = 1 ] && kill -KILL -- "-$pid" 2>/dev/null
      break
    fi
    sleep 0.01
  done
  while alive "$pid"; do sleep 0.01; done
  now; echo "STOPPED $(( NOW - start ))"
  WATCH="$pid $kids"
}
"""

SWAP = STOP_DAEMON + r"""
wait_memory() {
  timeout_ms=$1; min_kib=$2; gpu_max=$3
  now; start=$NOW; n=0; used=""
  while :; do
    left=""; for p in $WATCH; do alive "$p" && left="$left,$p"; done
    avail=; while read -r key kib _; do [ "$key" = MemAvailable: ] && avail=$kib && break; done < /proc/meminfo
    if [ -n "$gpu_max" ] && [ $((n % 10)) -eq 0 ]; then
      used=$(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | paste -sd';')
    fi
    now; ms=$(( NOW - start ))
    if [ -z "$left" ] && [ "$avail" -ge "$min_kib" ] && gpu_ok "$gpu_max" "$used"; then
      echo "R $ms $avail - $used"; echo "DONE $ms"; return 0
    fi
    [ $((n % 20)) -eq 0 ] && echo "R $ms $avail ${left#,} $used"
    if [ "$ms" -ge "$timeout_ms" ]; then echo "R $ms $avail ${left#,} $used"; echo "TIMEOUT $ms"; return 1; fi
    sleep 0.01; n=$((n+1))
  done
}

gpu_ok() {
  [ -z "$1" ] && return 0
  printf '%s\n' "$2" | tr ';' '\n' | awk -F, -v t="$1" '
    BEGIN { k = split(t, a, ","); for (i = 1; i <= k; i++) { split(a[i], b, ":"); max[b[1]] = b[2] } }
    ($1 in max) && $2 + 0 > max[$1] + 0 { bad = 1 } END { exit bad }'
}

# whether the started daemon ($new, output from byte $off of $log) is alive and ready now
ready_now() {
  alive "$new" || return 1
  if [ -n "$port" ]; then (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  else tail -c +"$((off + 1))" -- "$log" 2>/dev/null | grep -qE -- "$re"; fi
}

wait_ready() {
  pid=$1; log=$2; off=$3; re=$4; timeout_s=$5; port=$6; me=$$; use_log=1
  ( while alive "$pid"; do sleep 0.01; done; echo EXITED; pkill -TERM -P "$me" -x timeout ) 8>&- &
  watchers=$!
  if [ -n "$port" ]; then
    ( until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.02; done; echo READY;
      pkill -TERM -P "$me" -x timeout ) 8>&- &
    watchers="$watchers $!"
    use_log=0
  fi
  # mawk (Debian's and Ubuntu's awk) fills its input buffer before it reads a line from a pipe
  case "$(awk -W version 2>&1 | head -n 1)" in mawk*) line_input="-W interactive" ;; *) line_input="" ;; esac
  timeout "$timeout_s" tail -c +"$((off + 1))" -F -s 0.02 -- "$log" 2>/dev/null |
    awk $line_input -v re="$re" -v me="$me" -v use="$use_log" '{ print "LOG " $0; fflush() }
      use && $0 ~ re { print "READY"; fflush(); system("pkill -TERM -P " me " -x timeout"); exit }'
  kill $watchers 2>/dev/null  # only the watchers: the daemon is this shell's child too
  if [ "$stable_ms" -gt 0 ] && ready_now; then  # ready is not enough: it must stay up a while
    now; echo "WATCH $stable_ms"; until_ms=$(( NOW + stable_ms ))
    while alive "$pid" && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
  fi
  alive "$pid" && echo "ALIVE 1" || echo "ALIVE 0"
  return 0
}

# A dropped connection must not cut the swap between the stop and the start: writes to the closed
# channel fail, and the script goes on. The daemon gets the default dispositions back.
trap '' PIPE HUP
pid=$1; grace_ms=$2; group=$3; unit=$4; timeout_ms=$5; min_kib=$6; gpu_max=$7; bin=$8; target=$9
shift 9
cwd=$1; log=$2; re=$3; ready_s=$4; port=$5; fb_target=$6; fb_cwd=$7; fb_cmd=$8; fb_journal=$9; shift 9
stable_ms=$1; shift
# The swap holds its own lock until it ends, even when the deploy that started it has lost its connection
# (and with it the deploy lock); LOCK refuses a new deploy meanwhile. Nothing started here keeps fd 8.
exec 8>>"${target%/releases/*}/swap.lock"
flock -w 30 8 || { echo "FAILED another swap still runs on this host"; exit 0; }
WATCH=""
[ -n "$pid" ] && stop_daemon "$pid" "$grace_ms" "$group" "$unit"
wait_memory "$timeout_ms" "$min_kib" "$gpu_max" || exit 0
ln -sfn -- "$target" "$bin.swapctl-new" && mv -Tf -- "$bin.swapctl-new" "$bin" || { echo "FAILED switch"; exit 0; }
off=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
if [ -n "$unit" ]; then
  systemctl start -- "$unit" || { echo "FAILED systemctl start"; exit 0; }
  new=$(systemctl show -p MainPID --value -- "$unit")
else
  cd -- "$cwd" || { echo "FAILED cd $cwd"; exit 0; }
  ( trap - PIPE HUP; exec setsid env -i "$@" ) >> "$log" 2>&1 < /dev/null 8>&- &
  new=$!
fi
echo "STARTED $new $off"
now; started_ms=$NOW
wait_ready "$new" "$log" "$off" "$re" "$ready_s" "$port"

# When the deploy lost its connection, nobody will roll back a new daemon that failed: do it here.
[ -n "$fb_target" ] && ! ready_now || exit 0
printf 'NOTREADY\n' 2>/dev/null && exit 0  # someone still listens: the deploy decides
# Nobody listens: the log reader above stopped at its first write, maybe before the ready line, so
# wait for it here, to the same deadline, before calling the start a failure.
until_ms=$(( started_ms + ready_s * 1000 ))
while alive "$new" && ! ready_now && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
ready_now && exit 0
stop_daemon "$new" "$grace_ms" 1 "" >/dev/null 2>&1
wait_memory "$timeout_ms" "$min_kib" "" >/dev/null 2>&1 || exit 0
ln -sfn -- "$fb_target" "$bin.swapctl-new" && mv -Tf -- "$bin.swapctl-new" "$bin" || exit 0
cd -- "$fb_cwd" || exit 0
off=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
( trap - PIPE HUP; eval "exec setsid $fb_cmd" ) >> "$log" 2>&1 < /dev/null 8>&- &
printf '%s, "pid": %s, "log_offset": %s, "time": "%s"}\n' "$fb_journal" "$!" "$off" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "${target%/releases/*}/journal.jsonl"
"""

# Stops a daemon and nothing more (a failed start with nothing to go back to).
STOP_ONLY = STOP_DAEMON + r"""
stop_daemon "$1" "$2" 1 ""
"""

# Runs a program under another argv[0] without adding to its environment (bash's exec -a would).
PERL_ARGV0 = 'my $exe = shift; exec {$exe} @ARGV or die "swapctl: cannot run $exe: $!\\n";'

TAIL = r"""
tail -c "+$(( $2 + 1 ))" -- "$1" 2>/dev/null | tail -n "$3"
"""


def script(body: str, *args: Piece, label: str, bash: bool = False) -> Cmd:
    return Cmd.script(body, *args, label=label, shell="bash" if bash else "sh")
