"""The remote halves of the swap steps: fixed scripts, every value passed as a positional parameter.

Each script prints machine-readable lines (`WORD args...`) that the local side parses. A process is
alive when /proc/PID/stat exists and its state is not Z: a zombie has exited (and `kill -0` would
still succeed on it where nothing reaps orphans).
"""

from __future__ import annotations

from ..remote import Cmd, Piece

ALIVE = r"""
alive() { s=$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ]; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
"""

# Holds the host's deploy lock for as long as this command's stdin stays open: the lock dies with the
# SSH connection, so a killed swapctl never leaves a stale lock.
LOCK = r"""
dir=$1; info=$2
mkdir -p -m 700 -- "$dir" || exit 1
exec 9>>"$dir/lock"
if flock -n 9; then
  printf '%s\n' "$info" > "$dir/lock.info"
  echo LOCKED
  exec cat >/dev/null
fi
printf 'HELD %s\n' "$(cat -- "$dir/lock.info" 2>/dev/null)"
"""

# What swapctl must know of the running daemon to save it and to start it again exactly as it ran.
INSPECT = r"""
pid=$1; bin=$2; state=$3
sec() { printf '\n==> %s\n' "$1"; }
sec arch; uname -m
sec binary
if [ -L "$bin" ]; then echo "link $(readlink -- "$bin")"
elif [ -f "$bin" ]; then echo "file $(sha256sum < "$bin" | cut -d' ' -f1)"
else echo missing; fi
sec free; df -P -k -- "$(dirname -- "$bin")" | tail -n 1
sec releases
for m in "$state"/releases/*/manifest.json; do [ -f "$m" ] && { tr -d '\n' < "$m"; echo; }; done
[ -n "$pid" ] || exit 0
sec exe_sha; sha256sum < "/proc/$pid/exe" | cut -d' ' -f1
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
INSTALL = r"""
tmp=$1; dir=$2; name=$3; sha=$4; manifest=$5
got=$(sha256sum < "$tmp" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then rm -f -- "$tmp"; echo "MISMATCH $got"; exit 0; fi
chmod 755 "$tmp" && mkdir -p -m 700 -- "$dir" && mv -f -- "$tmp" "$dir/$name" &&
printf '%s\n' "$manifest" > "$dir/.manifest.tmp" && mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json" &&
echo INSTALLED
"""

LDD = r"""
out=$(ldd -- "$1" 2>&1); code=$?
printf '%s\n' "$out" | grep 'not found' && exit 0
echo OK
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

# Points the binary path at a release atomically: a new symlink renamed over the old path.
SWITCH = r"""
bin=$1; target=$2
ln -sfn -- "$target" "$bin.swapctl-new" && mv -Tf -- "$bin.swapctl-new" "$bin"
"""

# SIGTERM (and to its process group when it leads one), SIGKILL after the grace period.
# Prints KIDS (its descendants, snapshotted before the kill), then SIGKILL if needed, then STOPPED ms.
STOP = ALIVE + r"""
pid=$1; grace_ms=$2; group=$3; unit=$4
kids=$(ps -eo pid=,ppid= | awk -v root="$pid" '{p[$1]=$2} END {for (x in p) {y=p[x]; while (y in p && y != root && y > 1) y=p[y]; if (y == root) print x}}' | tr '\n' ' ')
echo "KIDS $kids"
start=$(now_ms)
if [ -n "$unit" ]; then systemctl stop -- "$unit" 2>&1 | sed 's/^/LOG /'; fi
kill -TERM "$pid" 2>/dev/null
[ "$group" = 1 ] && kill -TERM -- "-$pid" 2>/dev/null
while alive "$pid"; do
  if [ $(( $(now_ms) - start )) -ge "$grace_ms" ]; then
    echo SIGKILL
    kill -KILL "$pid" 2>/dev/null
    [ "$group" = 1 ] && kill -KILL -- "-$pid" 2>/dev/null
    break
  fi
  sleep 0.02
done
while alive "$pid"; do sleep 0.02; done
echo "STOPPED $(( $(now_ms) - start ))"
"""

# Waits until the old daemon and its children are gone, GPU memory is back and MemAvailable >= min.
# Streams `R ms avail_kib alive_pids gpu_used` readings; ends with DONE ms or TIMEOUT ms.
WAIT_MEMORY = ALIVE + r"""
timeout_ms=$1; min_kib=$2; gpu_max=$3; shift 3
start=$(now_ms); n=0; used=""
gpu_ok() {
  [ -z "$gpu_max" ] && return 0
  printf '%s\n' "$used" | tr ';' '\n' | awk -F, -v t="$gpu_max" '
    BEGIN { k = split(t, a, ","); for (i = 1; i <= k; i++) { split(a[i], b, ":"); max[b[1]] = b[2] } }
    ($1 in max) && $2 + 0 > max[$1] + 0 { bad = 1 } END { exit bad }'
}
while :; do
  left=""; for p in "$@"; do alive "$p" && left="$left,$p"; done
  avail=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if [ -n "$gpu_max" ] && [ $((n % 10)) -eq 0 ]; then
    used=$(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | paste -sd';')
  fi
  ms=$(( $(now_ms) - start ))
  if [ -z "$left" ] && [ "$avail" -ge "$min_kib" ] && gpu_ok; then echo "R $ms $avail - $used"; echo "DONE $ms"; exit 0; fi
  [ $((n % 10)) -eq 0 ] && echo "R $ms $avail ${left#,} $used"
  if [ "$ms" -ge "$timeout_ms" ]; then echo "R $ms $avail ${left#,} $used"; echo "TIMEOUT $ms"; exit 0; fi
  sleep 0.02; n=$((n+1))
done
"""

# Starts the daemon detached from the SSH session, in exactly the recorded environment: the arguments
# after the fixed ones are `K=V...` then the command, as `env -i` takes them. Prints STARTED pid offset.
START = r"""
cwd=$1; log=$2; unit=$3; shift 3
off=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
if [ -n "$unit" ]; then
  systemctl start -- "$unit" || exit 1
  echo "STARTED $(systemctl show -p MainPID --value -- "$unit") $off"
  exit 0
fi
cd -- "$cwd" || exit 1
setsid env -i "$@" >> "$log" 2>&1 < /dev/null &
echo "STARTED $! $off"
"""

# Runs a program under another argv[0] without adding to its environment (bash's exec -a would).
PERL_ARGV0 = 'my $exe = shift; exec {$exe} @ARGV or die "swapctl: cannot run $exe: $!\\n";'

# Streams the daemon's log from an offset until the ready regex matches (READY), the daemon exits
# (EXITED), or the time is up (TIMEOUT). With a port, ready is a connection accepted on it.
WAIT_READY = ALIVE + r"""
pid=$1; log=$2; off=$3; re=$4; timeout_s=$5; port=$6; me=$$; use_log=1
( while alive "$pid"; do sleep 0.02; done; echo EXITED; pkill -TERM -P "$me" -x timeout ) &
if [ -n "$port" ]; then
  ( sleep 0.02; until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.02; done; echo READY;
    pkill -TERM -P "$me" -x timeout ) &
  use_log=0
fi
timeout "$timeout_s" tail -c +"$((off + 1))" -F -s 0.05 -- "$log" 2>/dev/null |
  awk -v re="$re" -v me="$me" -v use="$use_log" '{ print "LOG " $0; fflush() }
    use && $0 ~ re { print "READY"; fflush(); system("pkill -TERM -P " me " -x timeout"); exit }'
alive "$pid" && echo "ALIVE 1" || echo "ALIVE 0"
pkill -TERM -P "$me" 2>/dev/null
exit 0
"""

TAIL = r"""
tail -c "+$(( $2 + 1 ))" -- "$1" 2>/dev/null | tail -n "$3"
"""


def script(body: str, *args: Piece, label: str, bash: bool = False) -> Cmd:
    return Cmd.script(body, *args, label=label, shell="bash" if bash else "sh")
