#!/bin/sh
# The swap itself, as one script on one channel: no round trip between the old daemon's exit and the new
# one's start, whatever the host's shell start-up costs (a .bashrc running `conda init` is common). It
# runs under bash when the readiness check is a port (/dev/tcp is bash's). It streams what happens
# (the words are swapctl/swap/report.py's Word):
#   KIDS pids | SIGKILL | STOPPED ms          stop (daemon.sh's stop_daemon)
#   R ms avail_kib alive gpu_used | DONE ms | TIMEOUT ms
#                                             wait until they are gone, GPU memory is back, MemAvailable >= min
#   STARTED pid log_offset [inv]              the binary path points at the release; started with env -i
#                                             (or its unit, whose InvocationID is inv)
#   LOG line | READY | EXITED | ALIVE 0/1     the log after the start until ready, exit or time-out
#   WATCH ms                                  ready: watched for ms more, as it must stay up that long
#   NOTREADY                                  not ready; when this line finds nobody listening any more,
#                                             the host goes back to the fallback release by itself
#   FAILED why                                it could not go on (another swap runs, the switch or start failed)
# Inputs:
#   pid grace_ms group unit       the daemon to stop (an empty pid: none runs), its process group, and the
#                                 systemd unit it runs under: stopped, started and rolled back through it
#   reset                         1: `systemctl reset-failed` the unit once started (a rollback does)
#   timeout_ms min_kib gpu_max    the memory wait
#   smi_cs                        nvidia-smi's limit in the memory wait, in 1/100 s
#   bin target sha cwd log        the binary path, the release it becomes (and its sha256, checked again before
#                                 anything stops), where the new daemon runs and logs
#   run_gid                       the group a daemon that is not root's runs as (empty: root's)
#   re ready_s port stable_ms     readiness: the log line (or the port), how long to wait, how long to stay up
#   envq                          the new daemon's whole environment, as shell assignments one a line
#   fb_target fb_sha fb_cwd fb_env fb_cmd  the fallback release when nobody listens (an empty fb_target: none), its
#                                 environment (as envq) and command line rendered once (quoted by swapctl's Cmd)
#   fb_host fb_from fb_to fb_current   for the journal line the host then writes itself
# Arguments: the new daemon's command line. Its environment is an input, read from stdin: on a command
# line (`env -i K=V...`) every user of the host could read it.
: "${pid?}" "${grace_ms?}" "${group?}" "${unit?}" "${timeout_ms?}" "${min_kib?}" "${gpu_max?}" "${reset?}"
: "${smi_cs?}"
: "${bin?}" "${target?}" "${sha?}" "${run_gid?}" "${cwd?}" "${log?}" "${re?}" "${ready_s?}" "${port?}" "${stable_ms?}" "${envq?}"
: "${fb_target?}" "${fb_sha?}" "${fb_cwd?}" "${fb_env?}" "${fb_cmd?}" "${fb_host?}" "${fb_from?}" "${fb_to?}" "${fb_current?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=daemon.sh
. ./daemon.sh

# whether the started daemon ($new, output from byte $off of $log) is alive and ready now
ready_now() {
  alive "$new" || return 1
  # shellcheck disable=SC3025 # with a port, swapctl runs this script under bash
  if [ -n "$port" ]; then (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  else log_since 2>/dev/null | grep -qE -- "$re"; fi
}

# log_since: the started daemon's output, from byte $off of $log; with log "journal", its unit's journal
# for this start (its InvocationID, $inv)
log_since() {
  if [ "$log" = journal ]; then journalctl -q -o cat _SYSTEMD_INVOCATION_ID="$inv"
  else tail -c +"$((off + 1))" -- "$log"; fi
}

# wait_ready: streams the new daemon's log until it is ready, exits or ready_s pass; then, with stable_ms,
# watches it that long; prints ALIVE 1 or ALIVE 0 at the end.
wait_ready() {
  me=$$; use_log=1
  # a daemon gone before the log reader starts (a unit's MainPID 0: it exited already) would leave the
  # reader to its time-out: the end is retried until it finds the reader (the watchers are killed after)
  ( while alive "$new"; do sleep 0.01; done; echo EXITED; n=0
    until pkill -TERM -P "$me" -x timeout || [ "$n" -ge 500 ]; do n=$((n + 1)); sleep 0.01; done ) 8>&- &
  watchers=$!
  if [ -n "$port" ]; then
    # shellcheck disable=SC3025 # with a port, swapctl runs this script under bash
    ( until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.02; done; echo READY;
      pkill -TERM -P "$me" -x timeout ) 8>&- &
    watchers="$watchers $!"
    use_log=0
  fi
  # mawk (Debian's and Ubuntu's awk) fills its input buffer before it reads a line from a pipe
  case "$(awk -W version 2>&1 | head -n 1)" in mawk*) line_input="-W interactive" ;; *) line_input="" ;; esac
  # log_since, followed (tail -F); `timeout` is this shell's child, for the watchers' pkill
  # (-f alone starts at the last 10 lines: a daemon that wrote more before it starts would hide its ready line)
  if [ "$log" = journal ]; then set -- journalctl -q -o cat -f -n all _SYSTEMD_INVOCATION_ID="$inv"
  else set -- tail -c +"$((off + 1))" -F -s 0.02 -- "$log"; fi
  # shellcheck disable=SC2086 # $line_input is empty or two words
  timeout "$ready_s" "$@" 2>/dev/null |
    awk $line_input -v re="$re" -v me="$me" -v use="$use_log" '{ print "LOG " $0; fflush() }
      use && $0 ~ re { print "READY"; fflush(); system("pkill -TERM -P " me " -x timeout"); exit }'
  # shellcheck disable=SC2086 # only the watchers: the daemon is this shell's child too
  kill $watchers 2>/dev/null
  if [ "$stable_ms" -gt 0 ] && ready_now; then  # ready is not enough: it must stay up a while
    now; echo "WATCH $stable_ms"; until_ms=$(( NOW + stable_ms ))
    while alive "$new" && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
  fi
  if alive "$new"; then echo "ALIVE 1"; else echo "ALIVE 0"; fi
}

# start ENV COMMAND...: COMMAND in a session of its own (setsid), its output appended to $log, with the
# environment ENV (shell assignments, one a line) and nothing else. ENV goes to a clean shell through a
# pipe (fd 3), never through a command line, as `env -i K=V...` would put it. Sets new (its pid).
sid=$(command -v setsid)
start() {
  ( trap - PIPE HUP; start_env=$1; shift
    exec env -i -- /bin/sh -c 'unset PWD; set -a; . /dev/fd/3 || exit 127; set +a; exec "$@" 3<&-' \
      swapctl-start "$sid" "$@" 3<<EOF
$start_env
EOF
  ) >> "$log" 2>&1 < /dev/null 8>&- &
  new=$!
}

# switch_to RELEASE: the binary path becomes a symlink to RELEASE, atomically (a rename)
switch_to() { ln -sfn -- "$1" "$bin.swapctl-new" && mv -Tf -- "$bin.swapctl-new" "$bin"; }

# A dropped connection must not cut the swap between the stop and the start: writes to the closed
# channel fail, and the script goes on. The daemon gets the default dispositions back.
trap '' PIPE HUP
state=${target%/releases/*}
# The swap holds its own lock until it ends, even when the deploy that started it has lost its connection
# (and with it the deploy lock); lock.sh refuses a new deploy meanwhile. Nothing started here keeps fd 8.
exec 8>>"$state/swap.lock"
flock -w 30 8 || { echo "FAILED another swap still runs on this host"; exit 0; }
# the release is what was uploaded and checked, still: a file changed since is never switched to
got=$(sha256 < "$target")
if [ "$got" != "$sha" ]; then
  echo "FAILED release changed: $target has sha256 ${got:-unreadable}, not $sha"; exit 0
fi
WATCH=""; inv=""
[ -n "$pid" ] && stop_daemon "$pid" "$grace_ms" "$group" "$unit"
# no daemon, but its unit may be about to restart one (Restart=, after a crash): the stop cancels that
[ -z "$pid" ] && [ -n "$unit" ] && systemctl stop -- "$unit" >/dev/null 2>&1
wait_memory "$timeout_ms" "$min_kib" "$gpu_max" || exit 0
# a daemon that runs as another user (its gid set) must reach its release: the state directories become
# that group's, searchable by it and by nobody else (710)
if [ -n "$run_gid" ]; then
  for d in "${state%/*}" "$state" "$state/releases" "${target%/*}"; do chgrp -- "$run_gid" "$d" && chmod 710 "$d"; done
fi
switch_to "$target" || { echo "FAILED switch"; exit 0; }
off=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
if [ -n "$unit" ]; then
  start_unit "$unit" "$reset" || exit 0
else
  cd -- "$cwd" || { echo "FAILED cd $cwd"; exit 0; }
  start "$envq" "$@"
fi
echo "STARTED $new $off${inv:+ $inv}"
now; started_ms=$NOW
wait_ready
[ -n "$unit" ] && ! alive "$new" && hold_unit "$unit"

# When the deploy lost its connection, nobody will roll back a new daemon that failed: do it here.
{ [ -n "$fb_target" ] && ! ready_now; } || exit 0
printf 'NOTREADY\n' 2>/dev/null && exit 0  # someone still listens: the deploy decides
# Nobody listens: the log reader above stopped at its first write, maybe before the ready line, so
# wait for it here, to the same deadline, before calling the start a failure.
until_ms=$(( started_ms + ready_s * 1000 ))
while alive "$new" && ! ready_now && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
ready_now && exit 0
stop_daemon "$new" "$grace_ms" 1 "$unit" >/dev/null 2>&1
wait_memory "$timeout_ms" "$min_kib" "" >/dev/null 2>&1 || exit 0
off=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
# the journal line is made whole here (keys sorted, as swapctl writes its own), all but the pid and the
# outcome before the start, so that it is written in one go right after it
entry=$(printf '{"action": "auto-rollback", "by": %s, "current": %s, "from": %s, "host": %s, "log_offset": %s, ' \
  "$(json_str "$fb_host itself (swapctl lost its connection)")" "$(json_str "$fb_current")" \
  "$(json_str "$fb_from")" "$(json_str "$fb_host")" "$off")
rest() { printf '"reason": "%s", "time": "%s", "to": %s}' "$1" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(json_str "$fb_to")"; }
# a fallback changed on the host since it was checked is never started: no daemon runs, and the journal
# says why (status shows none; history this line)
if [ "$(sha256 < "$fb_target")" != "$fb_sha" ]; then
  printf '%s"outcome": "failed", "pid": null, %s\n' "$entry" \
    "$(rest "not ready, no swapctl listening, and the fallback release changed on the host: nothing started")" \
    >> "$state/journal.jsonl"
  exit 0
fi
switch_to "$fb_target" || exit 0
cd -- "$fb_cwd" || exit 0
if [ -n "$unit" ]; then  # back through the unit: a daemon started beside it, systemd would start again
  start_unit "$unit" 1 >/dev/null || exit 0
else
  eval "start \"\$fb_env\" $fb_cmd"
fi
printf '%s"outcome": "rolled-back", "pid": %s, %s\n' "$entry" "$new" "$(rest "not ready, and no swapctl listening")" \
  >> "$state/journal.jsonl"
