# shellcheck shell=sh
# The daemon's own view (cuzk's GET /status, read on the host: no port opens to the controller) and the
# drain before a stop. The swap script includes this file; status.sh reads the view with status_get too
# (status_get.sh).
# Needs lib.sh (now). Report words (swapctl/swap/words.py):
#   INFLIGHT ms queue q n [job:done/total:age_s ...] the proofs in flight as the daemon says, q queued
#   NOSTATUS why                                      the daemon's status did not answer
#   DRAINED ms                                        nothing in flight at the last reading: SIGINT, then the stop
#   UNDRAINED ms n                                    still n in flight after drain_ms

# shellcheck source=status_get.sh
. ./status_get.sh

# in_flight: a StatusSnapshot (stdin, JSON compact as serde_json writes it or with blanks between its tokens,
# as a proxy that pretty-prints it) as `queue N` then one `job_id done total age_s` line per proof in flight:
# a pipeline with a partition begun, partitions left and none failed (a finished one stays in the snapshot
# 30 s: status.rs:399-403). A pipeline none of whose partitions has begun counts as queued with the
# scheduler's queue_depth: stopped, it loses no work. The answer is the daemon's (or whoever holds its port):
# a job id keeps only printable ASCII without blanks ('?' for the rest, at most 128), and a count or an age
# only its leading digits (NaN, -5 or 1e400 read as 0), so every line parses and every journal line reads.
in_flight() {
  tr -d '\n' | awk '
    function whole(s) { return match(s, /^[0-9]+/) ? substr(s, 1, RLENGTH > 15 ? 15 : RLENGTH) + 0 : 0 }
    {
    gsub(/[ \t\r]*:[ \t\r]*/, ":"); gsub(/[ \t\r]*,[ \t\r]*/, ","); gsub(/[ \t\r]*[]][ \t\r]*/, "]")
    gsub(/[ \t\r]*[}][ \t\r]*/, "}"); gsub(/[[][ \t\r]+/, "["); gsub(/[{][ \t\r]+/, "{")
    q = $0; q = sub(/.*"queue_depth":/, "", q) ? whole(q) : 0
    n = split($0, chunk, /"job_id":/)
    for (i = 2; i <= n; i++) {
      c = chunk[i]; e = index(c, "]}"); if (e) c = substr(c, 1, e)
      id = c; sub(/^"/, "", id); sub(/".*/, "", id); gsub(/[^!-~]/, "?", id); id = substr(id, 1, 128)
      if (id == "") id = "?"
      t = c; t = sub(/.*"total_partitions":/, "", t) ? whole(t) : 0
      d = c; d = sub(/.*"partitions_done":/, "", d) ? whole(d) : 0
      a = c; a = sub(/.*"started_secs_ago":/, "", a) ? whole(a) : 0
      if (d >= t || c ~ /"state":"failed"/) continue
      if (c ~ /"state":"(synthesizing|synth_done|gpu|done)"/) line[++k] = sprintf("%s %d %d %d", id, d, t, a)
      else q++
    }
    print "queue " q
    for (i = 1; i <= k; i++) print line[i]
  }'
}

STATUS_MAX=4194304  # bytes of a status answer read, as status.sh reads it: past them, it is no answer

# status_read URL: status_get's answer (2 s, as it bounds it) of at most STATUS_MAX bytes; returns 1 when it
# failed or was longer (then the exit status after it is cut off too)
status_read() {
  got=$( { status_get "$1" 2>/dev/null; echo " $?"; } | head -c $(( STATUS_MAX + 5 )) )
  [ "${got##* }" = 0 ] || return 1
  printf '%s\n' "${got% *}"
}

# holds_port PORT PID: whether PID or one of its descendants holds the socket listening on PORT (its inode
# among their fds). Between the old daemon's exit and the new one's bind any user can listen there: only the
# judged process's own socket says it is ready or what it has in flight.
holds_port() {
  case $1 in '' | *[!0-9]*) return 1 ;; esac
  inodes=$(awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  [ -n "$inodes" ] || return 1
  for q in "$2" $(ps -eo pid=,ppid= | awk -v root="$2" '{p[$1]=$2} END {for (x in p) {y=p[x]; while (y in p && y != root && y > 1) y=p[y]; if (y == root) printf "%s ", x}}'); do
    # shellcheck disable=SC2010 # an fd's name is its number; what is read is the link, as ls -l shows it
    fds=$(ls -l "/proc/$q/fd" 2>/dev/null | grep -F 'socket:[')
    for i in $inodes; do case $fds in *"socket:[$i]"*) return 0 ;; esac; done
  done
  return 1
}

# url_port URL: the port of an http URL (80 without one)
url_port() { p=${1#*://}; p=${p%%/*}; case $p in *:*) echo "${p##*:}" ;; *) echo 80 ;; esac; }

# in_flight_line URL BEGIN_MS [PID]: the INFLIGHT line for the daemon's status now (ms since BEGIN_MS), or a
# NOSTATUS line (and returns 1); with PID, only from a port PID (or a descendant) listens on
in_flight_line() {
  [ -z "${3:-}" ] || holds_port "$(url_port "$1")" "$3" || {
    echo "NOSTATUS $1 is not served by the daemon (pid $3): another process holds its port, or none"; return 1; }
  body=$(status_read "$1") || { echo "NOSTATUS no answer of at most $STATUS_MAX bytes from $1 (or no curl, wget or python3 on the host)"; return 1; }
  [ -n "$body" ] || { echo "NOSTATUS $1 answered nothing"; return 1; }
  now
  printf '%s\n' "$body" | in_flight | awk -v ms=$(( NOW - $2 )) 'NR == 1 { q = $2; next }
    { n++; jobs = jobs " " $1 ":" $2 "/" $3 ":" $4 } END { print "INFLIGHT " ms " queue " q " " n + 0 jobs }'
}

# What the drain saw, for the journal line the swap script writes (stop_json): the first and the last
# INFLIGHT reading before the stop (their text after the word), the drain's wait, and a NOSTATUS reason
drain_first=""; drain_last=""; drain_waited=""; drain_note=""

# seen LINE [QUIET]: keeps an INFLIGHT or NOSTATUS line for the journal, and prints it unless QUIET
seen() {
  case $1 in
    INFLIGHT\ *) drain_last=${1#INFLIGHT }; [ -n "$drain_first" ] || drain_first=$drain_last ;;
    NOSTATUS\ *) drain_note=${1#NOSTATUS } ;;
  esac
  [ -n "${2:-}" ] || printf '%s\n' "$1"
}

# stop_json: JSON members for the journal line: the proofs in flight at the stop and how many it lost (null
# where the daemon's status did not answer), with a drain its wait and what was in flight when it began;
# nothing without a status_url
stop_json() {
  if [ -z "$drain_last" ]; then [ -n "$drain_note" ] && printf ', "in_flight_at_stop": null, "lost": null'; return 0; fi
  printf '%s\n%s\n' "$drain_last" "$drain_first" | awk -v waited="$drain_waited" '
    function esc(t,   i, c, o) {  # a JSON string body, one character at a time (awks differ on gsub and \\)
      o = ""
      for (i = 1; i <= length(t); i++) {
        c = substr(t, i, 1); o = o ((c == "\\" || c == "\"") ? "\\" c : (c ~ /[^ -~]/ ? "?" : c))
      }
      return o
    }
    function whole(s) { return match(s, /^[0-9]+/) ? substr(s, 1, RLENGTH > 15 ? 15 : RLENGTH) + 0 : 0 }
    function proofs(   i, out, p, id, frac, age) {
      out = ""
      for (i = 5; i <= NF; i++) {
        p = $i; age = p; sub(/.*:/, "", age); sub(/:[^:]*$/, "", p)
        frac = p; sub(/.*:/, "", frac); id = p; sub(/:[^:]*$/, "", id)
        id = esc(id)
        split(frac, dt, "/")
        out = out (out == "" ? "" : ", ") sprintf("{\"age_s\": %d, \"job_id\": \"%s\", \"partitions_done\": %d, \"total_partitions\": %d}", whole(age), id, whole(dt[1]), whole(dt[2]))
      }
      return "[" out "]"
    }
    NR == 1 { printf ", \"in_flight_at_stop\": %s, \"lost\": %d, \"queued_at_stop\": %d", proofs(), whole($4), whole($3) }
    NR == 2 && waited != "" { printf ", \"drain_s\": %.3f, \"in_flight_at_drain\": %s", waited / 1000, proofs() }'
}

# drain_daemon PID URL DRAIN_MS ON_TIMEOUT: waits until the daemon has no proof in flight, then SIGINT:
# its scheduler then hands out no job any more (engine.rs:1988-1992, 2033-2037), so one that arrives after
# the signal took stays queued and is retried by Curio. SIGINT is never sent after a reading that showed a
# proof in flight, but one that begins between the last reading and the signal is stranded by it (every
# partition not yet synthesized: docs/daemon.md) and lost at the stop; the reading after the signal counts
# it in `lost`. Under steady load a poll-then-signal drain cannot close that window (issue 43).
# After DRAIN_MS with proofs still in flight: returns 0 with ON_TIMEOUT "stop" (the stop loses them),
# 1 with "refuse" (nothing was signalled: the daemon works on). No status: returns 0, as a plain stop.
drain_daemon() {
  now; drain_begin=$NOW; last=""
  while :; do
    line=$(in_flight_line "$2" "$drain_begin" "$1") || { seen "$line"; return 0; }
    count=$(printf '%s\n' "$line" | cut -d' ' -f5)
    key=$(printf '%s\n' "$line" | awk '{ $1 = $2 = ""; for (i = 6; i <= NF; i++) sub(/:[0-9]+$/, "", $i); print }')
    if [ "$key" != "$last" ]; then seen "$line"; else seen "$line" quiet; fi; last=$key
    if [ "$count" = 0 ]; then
      kill -INT "$1" 2>/dev/null
      seen "$(in_flight_line "$2" "$drain_begin" "$1")"  # what got in before the signal took is lost at the stop
      now; drain_waited=$(( NOW - drain_begin )); echo "DRAINED $drain_waited"; return 0
    fi
    now
    if [ $(( NOW - drain_begin )) -ge "$3" ]; then
      drain_waited=$(( NOW - drain_begin )); echo "UNDRAINED $drain_waited $count"
      [ "$4" = refuse ] && return 1
      return 0
    fi
    sleep 0.05
  done
}

# before_stop PID URL MODE DRAIN_MS ON_TIMEOUT: with MODE "drain", drain_daemon (FAILED and returns 1 when
# it refuses); else the proofs in flight as the stop finds them, for the journal
before_stop() {
  if [ "$3" = drain ]; then
    drain_daemon "$1" "$2" "$4" "$5" && return 0
    echo "FAILED drain: proofs still in flight after $(( $4 / 1000 )) s and daemon.drain_timeout is \"refuse\": nothing was stopped"
    return 1
  fi
  now; seen "$(in_flight_line "$2" "$NOW" "$1")"
  return 0
}

# probe_ready URL PROBE PID: the started daemon's (PID's own port's) status answers (probe "status": the engine is up, as main.rs:118-127
# starts it before the status server) or shows a completed proof (probe "proof": counters.total_completed
# above 0, a fresh daemon's count)
probe_ready() {
  holds_port "$(url_port "$1")" "$3" || return 1
  body=$(status_read "$1") || return 1
  case $2 in
    status) printf '%s' "$body" | grep -q '"uptime_secs"' ;;
    proof) n=$(counter total_completed)
      case $n in *[1-9]*) return 0 ;; *) return 1 ;; esac ;;
    *) return 1 ;;
  esac
}

# probe_failed URL PID: the started daemon's (PID's own port's) status counts a failed proof and no completed
# one: counters.total_failed above 0, total_completed 0 (a proof that failed cuzk's self-check is counted
# so, engine.rs:630-634; the counter gives no reason, so any failed proof)
probe_failed() {
  holds_port "$(url_port "$1")" "$2" || return 1
  body=$(status_read "$1") || return 1
  case $(counter total_completed) in *[1-9]*) return 1 ;; esac
  case $(counter total_failed) in *[1-9]*) return 0 ;; *) return 1 ;; esac
}

# counter NAME: the digits of counters.NAME in $body (a status answer)
counter() { printf '%s\n' "$body" | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p"; }
