#!/bin/sh
# A host's status in one round trip (swapctl.facts.status parses it): sections `==> name`, each printed once,
# in the order of status.SECTIONS. Inputs: bin (daemon.binary, may be empty), state (its state directory, empty
# without a binary), ps_format (system.PS_FORMAT), gpu_fields and gpu_apps (nvidia.QUERY_FIELDS, QUERY_APPS),
# smi_cs (each nvidia-smi call's limit, 1/100 s), user (daemon.user), unit (daemon.unit), url
# (daemon.status_url), props (the systemd properties systemd.PROPERTIES reads, comma-separated), cfg (the
# config file the playbook's daemon.args name, or empty), cfg_default (the daemon's own default config file);
# arguments: the directories whose disks `df` reports.
: "${bin?}" "${state?}" "${ps_format?}" "${gpu_fields?}" "${gpu_apps?}" "${smi_cs?}" "${user?}" "${unit?}" "${url?}"
: "${props?}" "${cfg?}" "${cfg_default?}"
# shellcheck source=smi.sh
. ./smi.sh
# shellcheck source=status_get.sh
. ./status_get.sh
# shellcheck source=cgroup.sh
. ./cgroup.sh
sec() { printf '\n==> %s\n' "$1"; }
sec host; uname -m; uname -n
sec self; echo "$$"
sec ps; ps -ww -eo "$ps_format" | cut -c 1-65536  # any user's argv: a line of it is enough
# a link's target is any user's path, newlines and all: each entry ends in NUL, and tr swaps NUL and newline,
# so an entry is one line and a newline in it a NUL (no path holds one), swapped back by the parser
sec links; find /proc/[0-9]*/exe /proc/[0-9]*/cwd -maxdepth 0 -printf '%p\t%l\0' 2>/dev/null | tr '\n\0' '\0\n'
sec ids; grep -s -E '^(Uid|Gid|Threads):' /proc/[0-9]*/status
# each process on one thread: whether it is a fork that never ran exec (PF_FORKNOEXEC, 0x40 in its flags) and
# when it started, to the clock tick (ps's etimes is whole seconds): the uptime, the ticks a second, then
# `PID FLAGS STARTTIME` from /proc/PID/stat (fields 9, 20 and 22, after the last `) ` the kernel writes: a
# name may hold `) ` or a newline, and grep names the file each line came from)
sec starts; head -n 1 /proc/uptime; getconf CLK_TCK 2>/dev/null
grep -s -H '' /proc/[0-9]*/stat | sed -n 's,^/proc/\([0-9][0-9]*\)/stat:.*) [A-Za-z] \([-0-9][0-9]* \)\{5\}\([0-9][0-9]*\) \([-0-9][0-9]* \)\{10\}1 [-0-9][0-9]* \([0-9][0-9]*\) .*,\1 \3 \5,p'
# who the daemon may run as: daemon.user, else root or the owner of the binary; and the binary's directory
# as /proc/PID/exe names it (symlinks resolved)
sec daemon-user; [ -n "$user" ] && printf '%s %s\n' "$(id -u -- "$user" 2>/dev/null)" "$(id -g -- "$user" 2>/dev/null)"
sec binary-owner; [ -n "$bin" ] && stat -L -c %u -- "$bin" 2>/dev/null
sec binary-dir; [ -n "$bin" ] && readlink -f -- "${bin%/*}"
sec meminfo; cat /proc/meminfo
sec loadavg; cat /proc/loadavg
sec who; who 2>/dev/null
sec df; df -P -k -- "$@" 2>/dev/null
sec gpu
if command -v nvidia-smi >/dev/null 2>&1; then
  # one that hung once would hang again: the GPU's processes are not asked then
  smi --query-gpu="$gpu_fields" --format=csv && { sec gpu-apps; smi --query-compute-apps="$gpu_apps" --format=csv; }
else
  echo missing
fi
sec current; [ -n "$bin" ] && readlink -- "$bin"
sec swapping; [ -e "$state/swap.lock" ] && ! flock -n "$state/swap.lock" true 2>/dev/null && echo yes &&
  head -n 1 -c 4096 -- "$state/swap.info" 2>/dev/null
sec last-swap  # the journal's last line (swapctl.facts.journal_entry reads it): the host may have written it alone
[ -n "$state" ] && tail -c 65536 -- "$state/journal.jsonl" 2>/dev/null | tail -n 1
sec landings  # of the lines `history` reads (inspect.sh's), the last 200 that landed a release (at most 256 KiB,
# newest kept; a line cut at the front is no entry): where `rollback` goes, marked in the releases table
[ -n "$state" ] && tail -n 1000 -- "$state/journal.jsonl" 2>/dev/null | cut -c 1-65536 |
  grep -F -e '"outcome": "deployed"' -e '"outcome": "rolled-back"' | tail -n 200 | tail -c 262144
sec gpu-sampler  # swapctl.gpu.sampler: whether it runs, and its last note
g="$state/gpu"
if [ -n "$state" ] && [ -d "$g" ]; then
  if [ -f "$g/gpu-sampler.lock" ] && ! flock -n "$g/gpu-sampler.lock" true 2>/dev/null; then
    echo "running $(cat -- "$g/gpu-sampler.pid" 2>/dev/null)"; else echo idle; fi
  tail -n 1 -- "$g/gpu-sampler.notes" 2>/dev/null
fi
sec unit  # swapctl.facts.systemd: the playbook's unit, else the one a process running the binary is in
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  if [ -z "$unit" ] && [ -n "$bin" ] && real=$(readlink -f -- "$bin"); then
    p=$(find /proc/[0-9]*/exe -maxdepth 0 -lname "$real" -printf '%h\n' 2>/dev/null | head -n 1)
    [ -n "$p" ] && unit=$(grep -o '[^/]*\.service$' "$p/cgroup" 2>/dev/null | grep -v '^user@' | head -n 1)
  fi
  # none runs it (a unit crashed, waiting to restart, or stopped): a unit file that names the binary
  if [ -z "$unit" ] && [ -n "$bin" ]; then
    f=$(grep -lsF -- "$bin" /etc/systemd/system/*.service /run/systemd/system/*.service \
      /lib/systemd/system/*.service /usr/lib/systemd/system/*.service 2>/dev/null | head -n 1)
    unit=${f##*/}
  fi
  if [ -n "$unit" ]; then
    systemctl show -p "$props" -- "$unit" 2>/dev/null
    echo "--- cat"; systemctl cat -- "$unit" 2>/dev/null | head -c 65536
  fi
fi
sec releases
# a manifest over 1 MiB is no manifest swapctl wrote: cut, it does not parse, and is not shown
for m in "$state"/releases/*/manifest.json; do [ -f "$m" ] && { head -c 1048576 -- "$m" | tr -d '\n'; echo; }; done
# swapctl.facts.cgroup and .exposure: the processes that run a file in the binary's directory (the daemon is
# one), their memory cgroups and this script's (a daemon started by hand over SSH lands there), the TCP
# sockets they listen on, and their config files' lines that say where they listen and their memory budget
bdir=""; [ -n "$bin" ] && bdir=$(readlink -f -- "${bin%/*}")
# find's -lname is a glob: a directory named with * ? [ or \ matches as itself, escaped
bglob=$(printf '%s' "$bdir" | sed 's/[][*?\\]/\\&/g')
pids=""; [ -n "$bdir" ] && pids=$(find /proc/[0-9]*/exe -maxdepth 0 -lname "$bglob/*" 2>/dev/null |
  sed -n 's|^/proc/\([0-9]*\)/exe$|\1|p' | head -n 16)
sec cgroup; { echo "self $$"; for p in $pids; do echo "proc $p"; done; } | cg_report
sec listen
for p in $pids; do
  fds=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -lname 'socket:*' -printf ' %l' 2>/dev/null | tr -dc ' 0-9')
  [ -n "$fds" ] && awk -v pid="$p" -v fds="$fds " '$4 == "0A" && index(fds, " " $10 " ") { print pid, $2 }' \
    "/proc/$p/net/tcp" "/proc/$p/net/tcp6" 2>/dev/null
done
sec config
for p in - $pids; do
  if [ "$p" = - ]; then c=$cfg; f=$cfg; [ -n "$c" ] || continue
  else
    # whose it is, read before and after its command line: a process gone (or a pid reused) between is skipped,
    # so the file it names is never read as root for another user's process
    u=$(stat -c %u "/proc/$p" 2>/dev/null) || continue
    c=$(tr '\0\n' '\n?' < "/proc/$p/cmdline" 2>/dev/null | awk 'f { print; exit } /^--config=/ { print substr($0, 10); exit }
      $0 == "-c" || $0 == "--config" { f = 1 }')
    c=${c:-$cfg_default}; case $c in /*) f=$c ;; *) f=/proc/$p/cwd/$c ;; esac
    [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$u" ] || continue
  fi
  printf 'file %s %s\n' "$p" "$c" | tr -c '\n -~' '?'
  # a process's config is read as its own user: one that names a file only root may read learns nothing
  as=""; [ "$p" != - ] && [ "$u" != 0 ] && as="setpriv --reuid=$u --regid=$(stat -c %g "/proc/$p") --clear-groups"
  # shellcheck disable=SC2086 # as: setpriv and its options, or nothing
  [ -f "$f" ] && $as test -r "$f" && echo "  #read" && $as head -c 262144 -- "$f" 2>/dev/null | grep -E '^[[:space:]]*(\[|listen|status_listen|total_budget)' |
    head -n 64 | cut -c 1-512 | tr -c '\n -~' '?' | sed 's/^/  /'
done
# the daemon's own view (daemon.status_url), read here: no port opens to the controller. Last: whoever
# answers on that port writes what it likes, and a section line in it comes after the real one (ignored)
sec daemon-view; [ -n "$url" ] && { status_get "$url"; } 2>&1 | head -c 4194304
exit 0
