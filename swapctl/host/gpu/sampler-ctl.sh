# shellcheck shell=bash
# swapctl's control of the GPU sampler (sampler.sh). Inputs: action (start | stop | status), dir (the
# sampler's directory), user (daemon.user, who may own the binary's directory and those above it; empty:
# root only), and for a start the sampler's inputs pid max quiet interval query fields (sampler.sh says
# what they are; empty for stop and status), the sampler's body on stdin after them. One sampler per host:
# it holds DIR's gpu-sampler.lock while it runs. Prints report lines (swapctl.gpu.sampler.CtlWord): the
# action's outcome, then the state:
#   UNSAFE dir owner mode (and nothing else: a directory others may change, nothing done)
#   STARTED | ALREADY | RESTARTED | NO_NVIDIA_SMI | FAILED why | STOPPED | NOT_RUNNING
#   RUNNING sampler_pid daemon_pid started_utc   (or IDLE)
#   FILE size name ...   NOTE last-note-line
: "${action?}" "${dir?}" "${user?}" "${pid?}" "${max?}" "${quiet?}" "${interval?}" "${query?}" "${fields?}"
export LC_ALL=C

note() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >> gpu-sampler.notes; }
pgone() { s=; { read -r s < "/proc/$1/stat"; } 2>/dev/null; s=${s##*) }; [ -z "$s" ] || [ "${s%% *}" = Z ]; }
# running: the lock is held; spid and dpid: the sampler and the daemon it follows
running() {
  spid=; dpid=; since=
  [ -f gpu-sampler.lock ] && ! flock -n gpu-sampler.lock true 2>/dev/null || return 1
  read -r spid dpid _ since < gpu-sampler.pid 2>/dev/null
  return 0
}
# ends the running sampler and all it started (it leads its process group); $1 says why
stop_it() {
  a0=
  [ -n "$spid" ] && { IFS= read -r -d '' a0 < "/proc/$spid/cmdline"; } 2>/dev/null
  if [ "$a0" = swapctl-gpu-sampler ]; then  # not a pid since reused by another process
    kill -TERM -- "-$spid" 2>/dev/null
    flock -w 5 gpu-sampler.lock true || { kill -KILL -- "-$spid" 2>/dev/null; flock -w 5 gpu-sampler.lock true; }
  fi
  note "stopped: $1"
}

state() {
  if running; then echo "RUNNING $spid $dpid $since"; else echo IDLE; fi
  for f in gpu-samples-*.dmon gpu-query-*.csv; do [ -f "$f" ] && stat -c 'FILE %s %n' -- "$f"; done
  [ -f gpu-sampler.notes ] && printf 'NOTE %s\n' "$(tail -n 1 gpu-sampler.notes)"
  exit 0
}

# root writes and runs what is in DIR: refused where another user may rename it, or a directory above it
# (the binary's and those above it, the state tree)
# shellcheck source=lib.sh
. ./lib.sh
state=${dir%/*}
bad=$(unsafe_path "${state%/.swapctl/*}" "$( [ -n "$user" ] && id -u -- "$user" 2>/dev/null)")
[ -z "$bad" ] || { echo "UNSAFE $bad" | head -n 1; exit 0; }
# the state tree, made where missing (a start) and entered once, then DIR in it: a rename of .swapctl by the
# owner of the binary's directory afterwards redirects nothing (lib.sh's enter_state)
if [ "$action" = start ]; then why=$(make_state "$state" 2>&1) || { echo "FAILED $why" | head -n 1; exit 0; }; fi
enter_state "$state"; case $? in
  0) unsafe=$(unsafe_dir "${dir##*/}" "$dir") ;;
  2) [ "$action" = stop ] && echo NOT_RUNNING; echo IDLE; exit 0 ;;
esac
[ -z "$unsafe" ] || { echo "UNSAFE $unsafe" | head -n 1; exit 0; }

if [ "$action" != start ]; then
  cd -- "${dir##*/}" 2>/dev/null || { [ "$action" = stop ] && echo NOT_RUNNING; echo IDLE; exit 0; }
  if [ "$action" = stop ]; then
    exec 8>>gpu-sampler.ctl.lock; flock -w 30 8
    if running; then stop_it "by request"; echo STOPPED; else echo NOT_RUNNING; fi
  fi
  state
fi

[ -d "${dir##*/}" ] || why=$(mkdir -m 700 -- "${dir##*/}" 2>&1) || { echo "FAILED $why" | head -n 1; exit 0; }
cd -- "${dir##*/}" || exit 1
# one start or stop at a time: two starts at once would each clear the other's pid file
exec 8>>gpu-sampler.ctl.lock; flock -w 30 8
# the notes stay small: rewritten to their last lines now and then (fetch-logs then starts a new copy)
if [ -f gpu-sampler.notes ] && [ "$(stat -c %s gpu-sampler.notes)" -gt 65536 ]; then
  t=$(mktemp gpu-sampler.notes.XXXXXX) && tail -n 200 gpu-sampler.notes > "$t" && mv -f -- "$t" gpu-sampler.notes
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "not started: no nvidia-smi on this host (PATH=$PATH): no GPU samples"
  echo NO_NVIDIA_SMI; state
fi
outcome=STARTED
if running; then
  if [ "$dpid" = "$pid" ]; then echo ALREADY; state; fi
  stop_it "the daemon it followed (pid $dpid) was replaced by pid $pid"
  outcome=RESTARTED
fi
# the sampler runs as root what came on stdin, never a file in DIR: a file there could be swapped (or be a
# FIFO) between its writing and its reading. bash reads it from fd 3, a here-string: a pipe, or a file
# bash makes and unlinks itself.
body=$(cat)
rm -f gpu-sampler.pid gpu-sampler.sh  # an older swapctl's copy of the script: not run, not kept
# detached as the daemon is: its own session, no fd left on this SSH channel, HUP ignored; its inputs by name,
# in its environment (sampler.sh declares them)
( trap '' HUP; export pid max quiet interval query fields
  exec setsid bash --norc -c 'exec -a swapctl-gpu-sampler bash --norc /dev/fd/3' swapctl-gpu-sampler 3<<<"$body" ) \
  < /dev/null > /dev/null 2> gpu-sampler.err 8>&- &
child=$!
i=0
while [ "$i" -lt 200 ]; do  # 10 s: it writes its pid file once it holds the lock
  if [ -f gpu-sampler.pid ]; then echo "$outcome"; state; fi
  if pgone "$child"; then
    [ -f gpu-sampler.pid ] && { echo "$outcome"; state; }
    echo "FAILED $(tail -n 1 gpu-sampler.notes 2>/dev/null | cut -d' ' -f2-) $(head -c 300 gpu-sampler.err)"; state
  fi
  sleep 0.05; i=$((i + 1))
done
echo "FAILED the sampler did not start within 10 s"; state
