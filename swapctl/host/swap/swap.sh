#!/bin/sh
# The swap itself, as one script on one channel: no round trip between the old daemon's exit and the new
# one's start, whatever the host's shell start-up costs (a .bashrc running `conda init` is common). It
# runs under bash when the readiness check is a port (/dev/tcp is bash's). It streams what happens
# (the words are swapctl/swap/words.py's Word):
#   SWAP pid                                  this script's pid, first (a second Ctrl-C: interrupt.sh)
#   KIDS pids | SIGKILL | STOPPED ms          stop (daemon.sh's stop_daemon)
#   R ms avail_kib[/room_kib] alive gpu_used | DONE ms | TIMEOUT ms
#                                             wait until they are gone, GPU memory is back, the least of
#                                             MemAvailable and the cgroup's room (cgroup.sh) >= min
#   STARTED pid log_offset [inv]              the binary path points at the release; started with env -i
#                                             (or its unit, whose InvocationID is inv)
#   LOG line | READY | EXITED | ALIVE 0/1     the log after the start until ready, exit or time-out
#   WATCH ms                                  ready: watched for ms more, as it must stay up that long
#   FAILED why                                it could not go on (another swap runs, the switch or start failed)
#   TAIL line                                 after ROLLBACK: the failed start's last lines of log
#   ROLLBACK why                              the start failed (or a second Ctrl-C came): the host goes back to the
#                                             fallback by itself, whoever listens; the stop, memory wait, start and
#                                             readiness lines after it are the fallback's
#   RETRY n                                   the fallback died before it was ready and stable: its n-th start
#   MARKED id                                 the failed release is marked bad (its directory's `bad` link)
#   OUTCOME word pid                          how the swap ended: deployed | rolled-back | no-daemon | rollback-failed
#   JOURNAL ok|lost line                      the journal line the host wrote itself (lost: the disk refused it)
#   INFLIGHT | NOSTATUS | DRAINED | UNDRAINED the daemon's own view before the stop, and the drain (drain.sh)
#   OTHERCORDON | POSTWAIT | CORDON | TASKS | UNCORDON   Curio's cordon around the swap (curio.sh)
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
#   bad_re                        a log line that, before the ready line, fails the start (a proof's failed
#                                 self-check, when ready is a proof that passed it); empty: none
#   envq                          the new daemon's whole environment, as shell assignments one a line
#   status_url stop_mode drain_ms drain_fail   the daemon's GET /status (empty: none), "term" or "drain",
#                                 the drain's limit and what it does then ("stop" or "refuse"): drain.sh
#   probe fb_probe fb_re          readiness by status_url instead of the log: "status" or "proof" (empty: the log);
#                                 the fallback's, and its log line, when the host goes back (never "proof")
#   fb_target fb_sha fb_cwd fb_env fb_cmd  the fallback release when the start fails (an empty fb_target: none),
#                                 its environment (as envq) and command line rendered once (quoted by swapctl's Cmd)
#   lock_info                     what the deploy's lock.sh wrote in lock.info: the swap begins only while that
#                                 lock is held, by that deploy (empty: no deploy lock to check, as under Ansible)
#   cordon_nodes curio_via curio_cli curio_sql curio_env cuzk_tasks post_tasks poll_ms post_wait_ms max_cordon_ms up_re
#                                 Curio's cordon (curio.sh; an empty cordon_nodes: none); up_re: with a cordon
#                                 and a proof as readiness, the log line after which the node is uncordoned to
#                                 feed the new build its first proof (with a status_url: its status answers)
#   action j_by j_host j_from j_extra j_steps keep cap_bytes
#                                 the journal line the host writes itself at the end, on every path: deploy or
#                                 rollback, by whom, the host's name, the sha256 that ran before, more members
#                                 (`"upload": {...}`), the steps timed before the swap (`"lock": 0.1, ...`); the
#                                 journal's rotation (append_line)
# Arguments: the new daemon's command line. Its environment is an input, read from stdin: on a command
# line (`env -i K=V...`) every user of the host could read it.
: "${pid?}" "${grace_ms?}" "${group?}" "${unit?}" "${timeout_ms?}" "${min_kib?}" "${gpu_max?}" "${reset?}"
: "${smi_cs?}"
: "${bin?}" "${target?}" "${sha?}" "${run_gid?}" "${cwd?}" "${log?}" "${re?}" "${ready_s?}" "${port?}" "${stable_ms?}" "${envq?}"
: "${bad_re?}"
: "${status_url?}" "${stop_mode?}" "${drain_ms?}" "${drain_fail?}" "${probe?}" "${fb_probe?}" "${fb_re?}"
: "${fb_target?}" "${fb_sha?}" "${fb_cwd?}" "${fb_env?}" "${fb_cmd?}" "${lock_info?}"
: "${cordon_nodes?}" "${curio_via?}" "${curio_cli?}" "${curio_sql?}" "${curio_env?}" "${cuzk_tasks?}" "${post_tasks?}" "${poll_ms?}"
: "${post_wait_ms?}" "${max_cordon_ms?}" "${up_re?}"
: "${action?}" "${j_by?}" "${j_host?}" "${j_from?}" "${j_extra?}" "${j_steps?}" "${keep?}" "${cap_bytes?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=daemon.sh
. ./daemon.sh
# shellcheck source=drain.sh
. ./drain.sh
# shellcheck source=curio.sh
. ./curio.sh

# whether the started daemon ($new, output from byte $off of $log) is alive and ready now
ready_now() {
  alive "$new" || return 1
  if [ -n "$port" ] || [ -n "$probe" ]; then ready_probe
  elif [ -n "$bad_re" ]; then log_since 2>/dev/null | first_line
  else log_since 2>/dev/null | grep -qE -- "$re"; fi
}

# first_line: which comes first on stdin: a line of re (0), one of bad_re (2), or neither (1)
first_line() {
  awk -v re="$re" -v bad="$bad_re" 'BEGIN { st = 1 } $0 ~ bad { st = 2; exit } $0 ~ re { st = 0; exit }
    END { exit st }'
}

# unfit: the started daemon logged a bad_re line before any ready line (its proof failed the self-check), or
# (probe "proof") its status counts a failed proof and no completed one
unfit() {
  if [ "$probe" = proof ]; then probe_failed "$status_url" "$new"; return; fi
  [ -n "$bad_re" ] || return 1
  log_since 2>/dev/null | first_line
  [ $? = 2 ]
}

# ready_probe: the status probe (drain.sh's probe_ready), else whether the port takes a connection; either
# only on a port the started daemon (or a descendant) listens on
ready_probe() {
  [ -n "$probe" ] && { probe_ready "$status_url" "$probe" "$new"; return; }
  holds_port "$port" "$new" || return 1
  # shellcheck disable=SC3025 # with a port, swapctl runs this script under bash
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

# log_since: the started daemon's output, from byte $off of $log; with log "journal", its unit's journal
# for this start (its InvocationID, $inv)
log_since() {
  # shellcheck disable=SC2086 # runas: setpriv and its options, or nothing
  if [ "$log" = journal ]; then journalctl -q -o cat _SYSTEMD_INVOCATION_ID="$inv"
  else $runas tail -c +"$((off + 1))" -- "$log"; fi
}

# wait_ready: streams the new daemon's log until it is ready, exits or ready_s pass; then, with stable_ms,
# watches it that long; prints ALIVE 1 or ALIVE 0 at the end.
# The log reader (tail -F, or journalctl -f) is ended by its own pid, which it leaves in a file: ended through
# `timeout`, a TERM that reached timeout as it started left its command running without it, holding the
# pipe open, and the swap waited for ever, its new build dead and nothing rolled back (coreutils 9.1:
# 2 of 40 `journalctl -f`, 1 of 60 `tail -F`; a build that dies at once is when it happens). Without a file
# for the pid there is no reader: settle polls the log to the same deadline.
wait_ready() {
  me=$$; use_log=1; watched=""; now; started_ms=$NOW
  rp=$(mktemp 2>/dev/null) || rp=$(mktemp -p "${target_here%/*}" 2>/dev/null) || rp=""
  # a daemon gone before the reader starts (a unit's MainPID 0: it exited already): the end is retried until
  # the reader is there (the watchers are killed after)
  ( while alive "$new"; do sleep 0.01; done; echo EXITED; n=0
    until end_reader || [ "$n" -ge 500 ]; do n=$((n + 1)); sleep 0.01; done ) 8>&- &
  watchers=$!
  ( until_ms=$(( started_ms + ready_s * 1000 )); while now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
    end_reader ) 8>&- >/dev/null &
  watchers="$watchers $!"
  if [ -n "$port" ] || [ -n "$probe" ]; then
    ( until ready_probe; do unfit && { end_reader; exit; }; sleep 0.02; done; echo READY; end_reader ) 8>&- &
    watchers="$watchers $!"
    use_log=0
  fi
  # mawk (Debian's and Ubuntu's awk) fills its input buffer before it reads a line from a pipe
  case "$(awk -W version 2>&1 | head -n 1)" in mawk*) line_input="-W interactive" ;; *) line_input="" ;; esac
  # log_since, followed (-f alone starts at the last 10 lines: a daemon that wrote more before it starts
  # would hide its ready line)
  # shellcheck disable=SC2086 # runas: setpriv and its options, or nothing
  if [ "$log" = journal ]; then set -- journalctl -q -o cat -f -n all _SYSTEMD_INVOCATION_ID="$inv"
  else set -- $runas tail -c +"$((off + 1))" -F -s 0.02 -- "$log"; fi
  if [ -n "$rp" ]; then
    # shellcheck disable=SC2086 # $line_input is empty or two words
    { "$@" 2>/dev/null 8>&- & echo "$!" > "$rp"; wait "$!"; } |
      awk $line_input -v re="$re" -v bad="$bad_re" -v rp="$rp" -v use="$use_log" '
        # the reader ends by its pid, read here as a number: the path of the pid file never reaches a shell
        function stop_reader(  p) { if ((getline p < rp) > 0) system("kill -TERM " int(p) " 2>/dev/null"); close(rp) }
        { print "LOG " $0; fflush() }
        use && bad != "" && $0 ~ bad { stop_reader(); exit }
        use && $0 ~ re { print "READY"; fflush(); stop_reader(); exit }'
  fi
  # shellcheck disable=SC2086 # only the watchers: the daemon is this shell's child too
  kill $watchers 2>/dev/null
  [ -n "$rp" ] && rm -f -- "$rp"
  settle
  if alive "$new"; then say "ALIVE 1"; else say "ALIVE 0"; fi
}

# end_reader: TERM to wait_ready's log reader, by the pid it left in $rp; returns 1 while it has not started
end_reader() {
  r=""; [ -n "$rp" ] && read -r r < "$rp" 2>/dev/null
  [ -n "$r" ] && kill -TERM "$r" 2>/dev/null
}

# settle: the rest of wait_ready's deadline and the watch after ready. The log reader stops at its first write
# once nobody listens (the connection dropped), maybe before the ready line: the host waits on by itself, to
# the same deadline, before it calls the start a failure. Sets watched once ready (it must stay up stable_ms).
settle() {
  until_ms=$(( started_ms + ready_s * 1000 ))
  while alive "$new" && ! ready_now && ! unfit && ! stopping && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
  if [ -z "$watched" ] && ready_now && ! stopping; then
    watched=1
    if [ "$stable_ms" -gt 0 ]; then  # ready is not enough: it must stay up a while
      now; say "WATCH $stable_ms"; until_ms=$(( NOW + stable_ms ))
      while alive "$new" && ! stopping && now && [ "$NOW" -lt "$until_ms" ]; do sleep 0.05; done
    fi
  fi
}

# wait_up: the started daemon up (its status answers, else its log has up_re), within ready_s
wait_up() {
  now; until_ms=$(( NOW + ready_s * 1000 ))
  while alive "$new" && ! stopping && now && [ "$NOW" -lt "$until_ms" ]; do
    if [ -n "$status_url" ]; then probe_ready "$status_url" status "$new" && return 0
    else log_since 2>/dev/null | grep -qE -- "$up_re" && return 0; fi
    sleep 0.05
  done
  return 1
}

# say LINE: a report line; once nobody reads them (the deploy lost its connection) the host goes on alone
say() { printf '%s\n' "$*" 2>/dev/null || alone=1; }

# stopping: a second Ctrl-C came (interrupt.sh's SIGUSR1) while the new build starts: roll back at once
stopping() { [ -n "$interrupted" ] && [ -z "$back" ]; }

# start CWD ENV COMMAND...: COMMAND in CWD, in a session of its own (setsid), its output appended to $log,
# with the environment ENV (shell assignments, one a line) and nothing else. ENV goes to a clean shell through a
# pipe (fd 3), never through a command line, as `env -i K=V...` would put it. Sets new (its pid). env,
# setsid and a leading setpriv or perl are the system's own (tool): ENV's PATH is the daemon's. A daemon of
# another user (setpriv: runas) opens its log itself, as that user, after setpriv: root never opens a file
# through that user's directory, which may hold a link to one of root's
sid=$(tool setsid); envp=$(tool env)
start() {
  ( trap - PIPE HUP; cd -- "$1" || exit 127; start_env=$2; shift 2
    case $1 in perl) t=$(tool perl) && shift && set -- "$t" "$@" ;; esac
    if [ "$1" = setpriv ]; then
      [ -n "$runas" ] && shift 4 || exit 127
      # shellcheck disable=SC2086,SC2016 # runas: setpriv and its 3 options; $0 and $@ are the inner shell's
      set -- $runas /bin/sh -c 'exec >>"$0" 2>&1 && exec "$@"' "$log" "$@"; exec >/dev/null 2>&1
    else exec >>"$log" 2>&1; fi
    exec "$envp" -i -- /bin/sh -c 'unset PWD; set -a; . /dev/fd/3 || exit 127; set +a; exec "$@" 3<&-' \
      swapctl-start "$sid" "$@" 3<<EOF
$start_env
EOF
  ) < /dev/null 8>&- &
  new=$!
}

# runas_of COMMAND...: runas becomes what drops to COMMAND's user (the system's setpriv and the three options
# swaprun.command_for gives it), or nothing for a daemon of root's. Its log is read and sized as that user
runas_of() {
  case "$1 $2 $3 $4" in
    "setpriv --reuid="*" --regid="*" --init-groups") runas="$(tool setpriv) $2 $3 $4" ;;
    *) runas="" ;;
  esac
}

# log_size: where the next start's output begins in $log (as its user, the link followed as it will be)
log_size() {
  # shellcheck disable=SC2086 # runas: setpriv and its options
  if [ -n "$runas" ]; then $runas stat -L -c %s -- "$log" 2>/dev/null || echo 0
  else stat -c %s -- "$log" 2>/dev/null || echo 0; fi
}

# in_bindir COMMAND...: COMMAND in a subshell whose cwd is the binary's directory, entered again (cd -P) and
# found where enter_state found it; COMMAND names what it makes there by name only. A link put in place of that
# directory (or one above it) by whoever may rename it is never followed: nothing is done
in_bindir() { ( cd -P -- "${bin%/*}/" 2>/dev/null && [ "$(pwd -P)" = "$real_bindir" ] && "$@" ); }

# new_link TO: a symlink to TO under a fresh name beside the binary (BIN.swapctl-new.XXXXXXXX; ln -sT never
# replaces a file, nor makes its link inside a directory another user named so first); prints that name
# shellcheck disable=SC2317 # new_link and switch_here run through in_bindir
new_link() { l=$(mktemp -u -- "${bin##*/}.swapctl-new.XXXXXXXX") && ln -sT -- "$1" "$l" && printf '%s\n' "$l"; }

# switch_to RELEASE: the binary path becomes a symlink to RELEASE, atomically (a rename: it replaces a link
# there, never follows one)
switch_to() { in_bindir switch_here "$1"; }
# shellcheck disable=SC2317
switch_here() { l=$(new_link "$1") && { mv -Tf -- "$l" "${bin##*/}" || { rm -f -- "$l"; return 1; }; }; }

# killed_by: the signal that ended the started daemon when it was one of those a person or a tool sends
# (HUP INT KILL TERM: someone killed it, it did not fail by itself); nothing otherwise. Only once it ended.
killed_by() {
  if [ -n "$unit" ]; then
    [ "$(systemctl show -p ExecMainCode --value -- "$unit" 2>/dev/null)" = 2 ] || return 0
    code=$(systemctl show -p ExecMainStatus --value -- "$unit" 2>/dev/null)
  else
    wait "$new" 2>/dev/null; code=$?
    [ "$code" -gt 128 ] || return 0
    code=$(( code - 128 ))
  fi
  case $code in 1|2|9|15) echo "$code" ;; esac
}

# why_failed: why the new build is not running ready (sets why), and whether that is its own fault (bad=1)
why_failed() {
  bad=1
  if stopping; then why="a second Ctrl-C"; bad=""
  elif [ -n "$failed" ]; then why="it could not be started ($failed)"
  elif unfit && [ "$probe" = proof ]; then why="a proof it made failed before one completed (its status: total_failed above 0)"
  elif unfit; then why="a proof it made failed cuzk's self-check before one passed (/$bad_re/ in its log)"
  elif ! alive "$new"; then
    sig=$(killed_by)
    if [ -n "$sig" ]; then why="it was killed by signal $sig${watched:+ after its ready line}"; bad=""
    elif [ -n "$watched" ]; then why="it printed its ready line, then exited"
    else why="it exited before it was ready"; fi
  else why="not ready after $ready_s s"; fi
}

# took STEP: STEP's seconds (since the last step ended) among the steps of this part of the swap
took() { now; steps="$steps, \"$1\": $(( (NOW - mark) / 1000 )).$(printf %03d $(( (NOW - mark) % 1000 )))"; mark=$NOW; }

# jv TEXT: TEXT as a JSON string, or null when it is empty
jv() { if [ -n "$1" ]; then json_str "$1"; else printf null; fi; }

# finish OUTCOME PID REASON: the host's own journal line for this swap, whoever listens, written whole (or
# not at all, on a full disk); then OUTCOME and JOURNAL for swapctl. `by` says so when nobody listened.
finish() {
  now; say "OUTCOME $1 ${2:--}"
  by=$j_by; [ -n "$alone" ] && by="$j_host itself (swapctl lost its connection; $j_by started it)"
  to=$sha; current=${target%/*}; current=${current##*/}; from=$j_from; act=$action; more=""
  if [ -n "$back" ]; then  # the new build failed: the line says so, and what runs instead
    to=$fb_sha; current=${fb_target%/*}; current=${current##*/}; from=$sha
    [ "$action" = deploy ] && act=auto-rollback
    [ -z "$2" ] && [ "$1" != rollback-failed ] && current=""
    flog="$log from byte $first_off"; [ "$log" = journal ] && flog="journalctl -u $unit"
    more=", \"failed_log\": $(json_str "$flog"), \"marked_bad\": ${marked:-false}, \"rollback_steps\": {${steps#, }}"
    steps=$first_steps
  fi
  [ -n "$3" ] && more="$more, \"reason\": $(json_str "$3")"
  [ "$1" = no-daemon ] && [ -z "$back" ] && current=""
  lo=null; [ -n "$2" ] && lo=$off
  [ -n "$cordoned" ] && uncordon_ours "$1"  # on every path, before the line that says so
  line="{\"action\": \"$act\", \"by\": $(json_str "$by"), \"current\": $(jv "$current"), \"from\": $(jv "$from"), \
\"host\": $(json_str "$j_host"), \"log_offset\": $lo, \"outcome\": \"$1\", \"pid\": ${2:-null}$more$(stop_json)$(cordon_json), \
\"steps\": {${j_steps}${j_steps:+${steps:+, }}${steps#, }}, \"time\": \"$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)\", \
\"to\": $(jv "$to")${j_extra:+, $j_extra}}"
  [ -n "$way_back" ] && in_bindir rm -f -- "$way_back"
  if append_line journal.jsonl "$line" "$keep" "$cap_bytes"; then say "JOURNAL ok $line"
  else say "JOURNAL lost $line"; fi
  exit 0
}

# mark_good: a release marked bad that has now come up and stayed up (deployed again on purpose) is good
# again: its `bad` link goes, and its manifest says ok, else it would never be a fallback or a rollback target
mark_good() {
  dir=${target_here%/*}
  [ -L "$dir/bad" ] && rm -f -- "$dir/bad"
  grep -q '"status":"bad"' -- "$dir/manifest.json" 2>/dev/null || return 0
  { sed 's/"status":"bad"/"status":"ok"/' -- "$dir/manifest.json" > "$dir/manifest.json.tmp.$$" &&
    mv -f -- "$dir/manifest.json.tmp.$$" "$dir/manifest.json"; } 2>/dev/null || rm -f -- "$dir/manifest.json.tmp.$$"
}

# mark_bad: the failed release is never a rollback target again, when it failed by itself. A symlink (no data
# block: it is made on a disk full to its last byte) that inspect.sh reads; the manifest says so too when the
# disk lets it (a copy, then a rename)
mark_bad() {
  [ -n "$bad" ] || return 0
  dir=${target_here%/*}
  ln -s failed-start "$dir/bad" 2>/dev/null || [ -L "$dir/bad" ] || return 0
  marked=true; say "MARKED ${dir##*/}"
  { sed 's/"status":"ok"/"status":"bad"/' -- "$dir/manifest.json" > "$dir/manifest.json.tmp.$$" &&
    mv -f -- "$dir/manifest.json.tmp.$$" "$dir/manifest.json"; } 2>/dev/null || rm -f -- "$dir/manifest.json.tmp.$$"
}

# start_target: the binary path becomes the release, and it starts (through its unit, or here); sets failed
start_target() {
  switch_to "$target" || { failed="FAILED switch"; say "$failed"; return 1; }
  runas_of "$@"; off=$(log_size)
  if [ -n "$unit" ]; then
    start_unit "$unit" "$reset" || { failed="systemctl start $unit refused"; return 1; }
  else
    (cd -- "$cwd") || { failed="FAILED cd $cwd"; say "$failed"; return 1; }
    start "$cwd" "$envq" "$@"
  fi
  say "STARTED $new $off${inv:+ $inv}"
}

# keep_way_back: the binary path's link to the fallback, made before anything stops (a fresh name: ln -s never
# replaces a file), so that going back is a rename, which a disk full to its last byte still allows (a
# symlink to a long path takes a data block)
keep_way_back() {
  [ -n "$fb_target" ] || return 0
  way_back=$(in_bindir new_link "$fb_target" 2>/dev/null) || way_back=""
}

# switch_back: the binary path becomes the fallback release again (the link kept_way_back made, else a new one)
switch_back() {
  [ "$(readlink -- "$bin")" = "$fb_target" ] && return 0
  if [ -n "$way_back" ] && in_bindir mv -Tf -- "$way_back" "${bin##*/}" 2>/dev/null; then way_back=""; return 0; fi
  switch_to "$fb_target"
}

# start_fallback: as start_target, for the fallback release, started as it was recorded
start_fallback() {
  switch_back || return 1
  eval "runas_of $fb_cmd"; off=$(log_size)
  if [ -n "$unit" ]; then  # back through the unit: a daemon started beside it, systemd would start again
    start_unit "$unit" 1 >/dev/null || return 1
  else
    (cd -- "$fb_cwd") || return 1
    eval "start \"\$fb_cwd\" \"\$fb_env\" $fb_cmd"
  fi
  say "STARTED $new $off${inv:+ $inv}"
}

# failed_tail: the failed start's last 20 lines of log, before anything else runs. journald reads an exited
# daemon's last lines from its stream after systemd has seen it exit: `journalctl --sync` returns once journald
# has handled what was queued (as root; without, the lines are read as they are). A daemon that exits at once
# is gone before journald reads its cgroup: its lines carry the unit's name but no InvocationID (5 of 30
# such starts on systemd 252 here), so without lines of $inv it is the unit's lines since its start (a unit
# between restarts has no InvocationID: the same)
failed_tail() {
  [ -n "$new" ] || [ -n "$unit" ] || return 0
  if [ "$log" != journal ]; then log_since | tail -n 20; return 0; fi
  journalctl --sync 2>/dev/null
  got=""; [ -n "$inv" ] && got=$(journalctl -q -o cat -n 20 _SYSTEMD_INVOCATION_ID="$inv")
  if [ -n "$got" ]; then printf '%s\n' "$got"
  else journalctl -q -o cat -n 20 -u "$unit" ${since:+--since "$since"}; fi
}

# go_back: the new build failed (why, bad): stop it, wait for memory, start the fallback, readiness; up to 3
# starts when it dies before it is ready and stable. All of it here, whatever happens to the deploy: no
# other process holds a part of the rollback. Ends the script with the journal line.
go_back() {
  say "ROLLBACK $why"
  failed_tail 2>/dev/null | sed 's/^/TAIL /'
  back=1; first_steps=$steps; first_off=${off:-0}; steps=""; now; mark=$NOW
  [ -n "$cordoned" ] && [ "$uncordoned" = true ] && cordon_again "${new:-}"  # the nodes fed it: drained again
  if [ -n "$new" ] || [ -n "$unit" ]; then stop_daemon "${new:-0}" "$grace_ms" 1 "$unit"; fi
  took stop
  if [ -z "$fb_target" ]; then mark_bad; finish no-daemon "" "$why; there is no earlier release to go back to"; fi
  new=""; wait_memory "$timeout_ms" "$min_kib" "" || {
    mark_bad; finish no-daemon "" "$why; memory not back after the stop, the fallback was not started"; }
  took memory
  # a fallback changed on the host since it was checked is never started: no daemon runs, and the journal
  # says why (status shows none; history this line)
  if [ "$(sha256 < "$fb_here")" != "$fb_sha" ]; then
    mark_bad; finish no-daemon "" "$why; the fallback release changed on the host: nothing started"
  fi
  probe=$fb_probe; re=$fb_re; bad_re=""; tries=0  # what ran before needs no proof that it can prove
  while [ "$tries" -lt 3 ]; do
    tries=$((tries + 1)); [ "$tries" -gt 1 ] && say "RETRY $tries"
    start_fallback || { mark_bad; finish rollback-failed "" "$why; the fallback could not be started"; }
    [ "$tries" = 1 ] && took start
    wait_ready
    if ready_now; then took ready; mark_bad; finish rolled-back "$new" "$why"; fi
    alive "$new" && break  # not ready in time, but it runs: left as it is
    [ -n "$unit" ] && hold_unit "$unit" >/dev/null
    WATCH="$new"; wait_memory "$timeout_ms" "$min_kib" "" >/dev/null
  done
  took ready; mark_bad
  if alive "$new"; then finish rollback-failed "$new" "$why; the fallback is not ready after $ready_s s (it runs)"; fi
  finish rollback-failed "" "$why; the fallback exited $tries times before it was ready: no daemon runs"
}

# A dropped connection must not cut the swap anywhere, the rollback included: writes to the closed channel
# fail, and the script goes on. The daemon gets the default dispositions back. A second Ctrl-C is SIGUSR1.
trap '' PIPE HUP
trap 'interrupted=1' USR1
# The state tree, entered once: from here on, every path into it is relative to this cwd, which no rename by
# the owner of the binary's directory (daemon.user may own it) can redirect (lib.sh's enter_state)
state=${target%/releases/*}
enter_state "$state" || { echo "FAILED the state directory is not safe to write to: $unsafe"; exit 0; }
if ! target_here=$(here "$state" "$target") || ! fb_here=$(here "$state" "${fb_target:-$state/-}"); then
  echo "FAILED the release to start is outside the state directory $state"; exit 0
fi
alone=""; interrupted=""; back=""; failed=""; bad=""; marked=""; new=""; steps=""
# The swap holds its own lock until it ends, even when the deploy that started it has lost its connection
# (and with it the deploy lock); lock.sh refuses a new deploy meanwhile. Nothing started here keeps fd 8.
exec 8>>swap.lock
flock -w 30 8 || { echo "FAILED another swap still runs on this host"; exit 0; }
# begun only under its deploy's lock: a shell that reads its command late (a slow .bashrc, its session killed
# by an sshd restart) after its deploy ended, or after another deploy took the lock, changes nothing
if [ -n "$lock_info" ] && { flock -n lock true || [ "$(cat -- lock.info 2>/dev/null)" != "$lock_info" ]; }; then
  echo "FAILED the deploy that started this swap no longer holds the host's deploy lock: nothing was stopped"; exit 0
fi
# who runs it, since when: a deploy refused meanwhile says so (lock.sh)
printf '{"by": %s, "since": "%s", "pid": %s}\n' "$(json_str "$j_by")" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" \
  > swap.info 2>/dev/null
say "SWAP $$"
# the release is what was uploaded and checked, still: a file changed since is never switched to
got=$(sha256 < "$target_here")
if [ "$got" != "$sha" ]; then
  echo "FAILED release changed: $target has sha256 ${got:-unreadable}, not $sha"; exit 0
fi
# the room its journal line needs, kept before anything stops (a host's first swap has none yet, and one on a
# disk full to its last byte used it): a deploy that cannot keep it changes nothing; a rollback goes on
if ! keep_reserve journal.jsonl && [ "$action" = deploy ]; then
  echo "FAILED the disk of $state is full: no room for this swap's journal line; nothing was stopped: free space there and deploy again"; exit 0
fi
# what root runs to start a daemon, found before anything stops: a host without one says so
for t in setsid env setpriv perl; do
  case "$t $* $fb_cmd" in setsid* | env* | *" $t "* | *"'$t'"*) ;; *) continue ;; esac
  tool "$t" >/dev/null || { echo "FAILED no tool: the host has no $t in /usr/sbin, /usr/bin, /sbin or /bin"; exit 0; }
done
# a daemon of another user opens its log itself (start): a log it cannot open is said before anything stops
runas_of "$@"
if [ -n "$runas" ] && [ -z "$unit" ] && [ "$log" != journal ]; then
  # shellcheck disable=SC2086,SC2016 # runas: setpriv and its options; $0 is the inner shell's
  $runas /bin/sh -c ': >>"$0"' "$log" 2>/dev/null || {
    echo "FAILED daemon.log $log cannot be opened for appending by the daemon's user (${runas#* }): make it a file of that user's, not a link to another's; nothing was stopped"; exit 0; }
fi
WATCH=""; inv=""; way_back=""; keep_way_back; now; mark=$NOW
# curio.sh: the nodes cordoned and drained (uncordoned on every path from here: finish, the EXIT trap, the
# watchdog); drain.sh: the proofs in flight, and the drain; a drain refused at its limit stops nothing
if [ -n "$pid" ] && [ -n "$cordon_nodes" ]; then
  trap '[ -n "$cordon_owner" ] && uncordon_ours exit' EXIT  # its own cordon only (curio.sh)
  cordon_drain "$pid" "$status_url" || { [ -n "$way_back" ] && in_bindir rm -f -- "$way_back"; exit 0; }
elif [ -n "$pid" ] && [ -n "$status_url" ]; then
  before_stop "$pid" "$status_url" "$stop_mode" "$drain_ms" "$drain_fail" || { [ -n "$way_back" ] && in_bindir rm -f -- "$way_back"; exit 0; }
fi
[ -n "$pid" ] && stop_daemon "$pid" "$grace_ms" "$group" "$unit"
# no daemon, but its unit may be about to restart one (Restart=, after a crash): the stop cancels that
[ -z "$pid" ] && [ -n "$unit" ] && systemctl stop -- "$unit" >/dev/null 2>&1
took stop
wait_memory "$timeout_ms" "$min_kib" "$gpu_max" || finish no-daemon "" "memory not back"
took memory
# a daemon that runs as another user (its gid set) must reach its release: the state directories become
# that group's, searchable by it and by nobody else (710)
if [ -n "$run_gid" ]; then
  for d in .. . releases "${target_here%/*}"; do chgrp -- "$run_gid" "$d" && chmod 710 "$d"; done
fi
if stopping; then why_failed; go_back; fi  # the second Ctrl-C came before the start: the new build never starts
start_target "$@" || { why_failed; go_back; }
took start
# ready is a proof: the nodes must feed the new build before it can make one
[ -n "$cordoned" ] && [ -n "$up_re" ] && wait_up && uncordon_ours started
wait_ready
[ -n "$unit" ] && ! alive "$new" && hold_unit "$unit"
if ready_now && ! stopping; then
  took ready
  mark_good
  if [ "$action" = deploy ]; then finish deployed "$new"; else finish rolled-back "$new"; fi
fi
took ready; why_failed; go_back
