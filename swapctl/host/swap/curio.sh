# shellcheck shell=sh disable=SC2154 # the swap script's inputs: swap.sh declares them (uncordon.sh its own)
# Curio's cordon around a swap (issue 43; docs/curio.md): the nodes that feed this cuzk stop taking work
# (`curio cli --machine HOST:PORT cordon`, cmd/curio/cordon.go), the swap waits until they own no
# cuzk-backed task (harmony_task.owner_id, as Curio's own restart check asks it: harmonytask.go:666-673)
# and the daemon has nothing in flight, and they are uncordoned on every path by this host, not by the
# controller. Needs lib.sh (now, json_str) and drain.sh (in_flight_line).
# Inputs (the swap script's): cordon_nodes (host:port ..., empty: no cordon), curio_via (cli: the curio CLI;
# api: each node's JSON-RPC, see curio_rpc), curio_cli, curio_sql (a psql
# client: psql or YugabyteDB's ysqlsh), curio_env (CURIO_DB_* assignments, one a line: stdin only),
# cuzk_tasks and post_tasks (task names, comma-separated), poll_ms, post_wait_ms, max_cordon_ms.
# Report words (swapctl/swap/words.py):
#   CORDON ms n [id:name:age_s ...]   the nodes cordoned; the cuzk-backed tasks they owned then
#   POSTWAIT ms n [id:name:age_s ...] a PoSt task the nodes own: no cordon until it is done
#   TASKS ms n [id:name:age_s ...]    what the nodes still own while the swap waits (printed when it changes)
#   UNCORDON ok|failed|ms why         the cordon's end, and whose it was (this script or its watchdog)
# The cordon is recorded in cordon.info (in the state directory, the script's cwd) before the first node is
# cordoned, and removed once every node is uncordoned: a cordon.info left behind is a cordon to undo
# (`swapctl uncordon`, the next deploy or rollback: uncordon.sh).

# curio_find NAME: an absolute path as it is, else NAME in the system's directories or /usr/local (where
# Curio's installer puts `curio`); never from a PATH another user had a hand in
curio_find() {
  case $1 in
    /*) [ -f "$1" ] && [ -x "$1" ] && printf '%s\n' "$1" ;;
    *) for d in /usr/local/bin /usr/local/sbin /usr/sbin /usr/bin /sbin /bin; do
         [ -f "$d/$1" ] && [ -x "$d/$1" ] && { printf '%s\n' "$d/$1"; return 0; }; done; return 1 ;;
  esac
}

# curio_run COMMAND...: COMMAND with the database's environment (curio_env) as Curio reads it
# (cmd/curio/main.go:122-158), and the same as libpq's PG* for the SQL client; 20 s at most
curio_run() {
  ( set -a; eval "$curio_env"; set +a
    h=${CURIO_DB_HOST:-${CURIO_HARMONYDB_HOSTS:-127.0.0.1}}
    PGHOST=${h%%,*} PGPORT=${CURIO_DB_PORT:-${CURIO_HARMONYDB_PORT:-5433}}
    PGDATABASE=${CURIO_DB_NAME:-${CURIO_HARMONYDB_NAME:-yugabyte}}
    PGUSER=${CURIO_DB_USER:-${CURIO_HARMONYDB_USERNAME:-yugabyte}}
    PGPASSWORD=${CURIO_DB_PASSWORD:-${CURIO_HARMONYDB_PASSWORD:-yugabyte}} PGCONNECT_TIMEOUT=5
    export PGHOST PGPORT PGDATABASE PGUSER PGPASSWORD PGCONNECT_TIMEOUT
    exec timeout 20 "$@" ) < /dev/null
}

# sql_list WORDS: WORDS (blank- or comma-separated, each already checked as a node or a task name) as an SQL
# list of string literals; a word with a quote or a backslash in it is dropped, never pasted
sql_list() {
  printf '%s\n' "$1" | tr ',' ' ' | awk '{ for (i = 1; i <= NF; i++) if ($i !~ /['"'"'\\]/) o = o (o == "" ? "" : ",") "'"'"'" $i "'"'"'" }
    END { print o == "" ? "NULL" : o }'
}

# node_tasks NAMES: the tasks of NAMES (a comma list) the nodes own now, one `id:name:age_s` a line; returns
# 1 when the database did not answer (then nothing is known, and the caller waits or refuses)
node_tasks() {
  sql="SELECT t.id || ':' || t.name || ':' || GREATEST(0, EXTRACT(EPOCH FROM (now() - t.update_time))::bigint)
    FROM curio.harmony_task t JOIN curio.harmony_machines m ON m.id = t.owner_id
    WHERE m.host_and_port IN ($(sql_list "$cordon_nodes")) AND t.name IN ($(sql_list "$1")) ORDER BY t.id"
  got=$(curio_run "$curio_sqlp" -XAtq -v ON_ERROR_STOP=1 -c "$sql" -c "select 'answered'" 2>/dev/null |
    tr -cd '0-9A-Za-z_:\n' | head -1001)
  [ "${got##*
}" = answered ] || return 1  # the last line: the database answered both
  printf '%s\n' "$got" | sed '$d'
}

# node_flags: `host:port true|false` for each node as harmony_machines has it (unschedulable); a node
# missing from the table is not printed
node_flags() {
  curio_run "$curio_sqlp" -XAtq -F ' ' -v ON_ERROR_STOP=1 -c "SELECT host_and_port, CASE WHEN unschedulable
    THEN 'true' ELSE 'false' END FROM curio.harmony_machines WHERE host_and_port IN ($(sql_list "$cordon_nodes"))" \
    -c "select 'answered'" 2>/dev/null | tr -cd '0-9A-Za-z_.:\[\] \n-'
}

# task_line WORD BEGIN_MS: WORD, ms since BEGIN_MS, the count and the tasks (stdin) on one line
task_line() { now; awk -v w="$1" -v ms=$(( NOW - $2 )) 'NF { n++; t = t " " $0 } END { print w " " ms " " n + 0 t }'; }

# cordon_set WORD NODES: `curio cli --machine NODE WORD`, or the node's RPC (curio_via=api), for each of NODES
# (blank-separated, checked host:port words, never globbed: [::1]:12300 is a pattern); returns 1 when one failed
cordon_set() {
  rc=0; set -f
  for n in $2; do
    if [ "$curio_via" = api ]; then curio_rpc "$n" "$1" || rc=1
    else curio_run "$curio_clip" cli --machine "$n" "$1" >/dev/null 2>&1 || rc=1; fi
  done
  set +f; return $rc
}

# curio_rpc NODE cordon|uncordon: the node's own JSON-RPC, Filecoin.Cordon or Filecoin.Uncordon at
# http://NODE/rpc/v0 (cmd/curio/rpc/rpc.go:79-84, :376-390; perm admin, api/api_curio.go:28-29), with the
# admin token (CURIO_API_TOKEN in curio_env) in an Authorization header that curl reads from its stdin, never
# on a command line; succeeds on HTTP 200 with a JSON-RPC `result` (go-jsonrpc response.go:16-36: `error`
# otherwise; a token that does not verify is a 401, auth/handler.go:28-42); 20 s at most. curl from the
# system's directories (curio_clip, cordon_tool's), reading no ~/.curlrc (-q) and through no proxy the
# environment names (--noproxy '*'): the header goes to the node and nowhere else
curio_rpc() {
  case $2 in cordon) m=Cordon ;; *) m=Uncordon ;; esac
  got=$( ( set -a; eval "$curio_env"; set +a; printf 'Authorization: Bearer %s\n' "${CURIO_API_TOKEN:-}" ) |
    timeout 20 "$curio_clip" -q --noproxy '*' -gsS --max-time 15 -o - -w '\n%{http_code}' -H @- \
      -H 'Content-Type: application/json' \
      --data-binary "{\"jsonrpc\":\"2.0\",\"method\":\"Filecoin.$m\",\"params\":[],\"id\":1}" \
      "http://$1/rpc/v0" 2>/dev/null) || return 1
  [ "${got##*
}" = 200 ] || return 1
  case $got in *'"error"'*) return 1 ;; *'"result"'*) return 0 ;; *) return 1 ;; esac
}

# cordon_tool: what cordons a node on this host (curl for curio_via=api, else curio_cli), found as
# curio_find finds a program: never from a PATH another user had a hand in; fails without it
cordon_tool() {
  if [ "$curio_via" = api ]; then curio_find curl; else curio_find "$curio_cli"; fi
}

# cordon_how: the cordon as an engineer would type it, for a FAILED or UNCORDON line
cordon_how() {
  if [ "$curio_via" = api ]; then printf '%s' "the node's Filecoin.$1 (curl, http://NODE/rpc/v0, CURIO_API_TOKEN)"
  else printf '%s' "\`curio cli --machine NODE $(printf '%s' "$1" | tr 'CU' 'cu')\`"; fi
}

# Whose cordon, since when: cordon.info holds `pid since_ms nodes...` of the swap that made it
cordoned=""; cordon_owner=""; cordon_begin=""; cordon_ms=""; cordon_tasks="[]"; uncordoned=""; drain_cordon_ms=""

# uncordon_ours WHY: the nodes cordon.info names uncordoned and the file removed (kept when one failed: the
# next deploy, rollback or `swapctl uncordon` tries again); prints UNCORDON
uncordon_ours() {
  [ -f cordon.info ] || return 0
  read -r owner _ nodes < cordon.info 2>/dev/null
  # a swap lifts only its own cordon (cordon_owner: its pid); a record another swap left is lifted by
  # `swapctl uncordon` or before the next deploy plans (uncordon.sh), not by a swap that did not make it
  [ -z "${cordon_owner:-}" ] || [ "$owner" = "$cordon_owner" ] || return 0
  if cordon_set uncordon "$nodes"; then
    rm -f cordon.info; uncordoned=true; now
    [ -n "$cordon_begin" ] && cordon_ms=$(( NOW - cordon_begin ))
    say "UNCORDON ok $1"
  else uncordoned=false; say "UNCORDON failed $1: $(cordon_how Uncordon) did not succeed for $nodes"; fi
}

# cordon_watch SWAP_PID: in the background, the cordon's end when the swap script is gone (killed: it cannot
# uncordon itself) or once the cordon has lasted max_cordon_ms, whatever the swap does then
cordon_watch() {
  trap - USR1; exec 8>&- >/dev/null 2>&1
  while alive "$1"; do  # a zombie is gone too
    now; [ $(( NOW - cordon_begin )) -ge "$max_cordon_ms" ] && break
    sleep 1
  done
  read -r owner _ < cordon.info 2>/dev/null && [ "$owner" = "$1" ] && uncordon_ours watchdog
}

# post_guard: no cordon while the nodes own a PoSt task (a WinningPoSt has one try, winning_task.go:593-600):
# waits up to post_wait_ms for them to end; returns 1 (FAILED said) when one is still there or the database
# did not answer
post_guard() {
  now; pg_begin=$NOW; last=""
  while :; do
    got=$(node_tasks "$post_tasks") || { echo "FAILED curio: the harmony database did not answer $curio_sqlp (check [curio] env and that the host reaches it): nothing was stopped"; return 1; }
    [ -z "$got" ] && return 0
    [ "$got" != "$last" ] && printf '%s\n' "$got" | task_line POSTWAIT "$pg_begin"; last=$got
    now
    if [ $(( NOW - pg_begin )) -ge "$post_wait_ms" ] || [ -n "$interrupted" ]; then
      echo "FAILED curio: the node owns a PoSt task ($(printf '%s' "$got" | tr '\n' ' ')) after $(( post_wait_ms / 1000 )) s: a swap never cordons a node while it proves PoSt; nothing was stopped"
      return 1
    fi
    sleep 1
  done
}

# cordon_drain PID URL: the cordon, one poll interval (the node may claim until its next poll:
# harmonytask.go:32, :651-663), then until the nodes own no cuzk-backed task and the daemon has nothing in
# flight and nothing queued. Returns 1 (FAILED said, every node uncordoned) when it refuses.
cordon_drain() {
  curio_clip=$(cordon_tool) || { if [ "$curio_via" = api ]; then echo "FAILED curio: no curl on the host (curio.via = \"api\" calls each node's Filecoin.Cordon with it): nothing was stopped"
    else echo "FAILED curio: no $curio_cli on the host (curio.cli: an absolute path, or a name in /usr/local/bin, /usr/bin, /bin): nothing was stopped"; fi; return 1; }
  curio_sqlp=$(curio_find "$curio_sql") || { echo "FAILED curio: no $curio_sql on the host (curio.sql: psql or ysqlsh, to read the node's tasks): nothing was stopped"; return 1; }
  flags=$(node_flags); mine=""
  [ "${flags##*
}" = answered ] || { echo "FAILED curio: the harmony database did not answer $curio_sqlp (check [curio] env and that the host reaches it): nothing was stopped"; return 1; }
  set -f  # node words: [::1]:12300 is no glob
  for n in $cordon_nodes; do
    case " $(printf '%s\n' "$flags" | awk -v n="$n" '$1 == n { print $2 }') " in
      " false ") mine="$mine $n" ;;
      " true ") echo "OTHERCORDON $n" ;;  # cordoned by someone else: left as it is, before and after
      *) set +f; echo "FAILED curio: node $n is not in harmony_machines (curio.nodes names each node's \`curio run --listen\` host:port): nothing was stopped"; return 1 ;;
    esac
  done
  set +f
  post_guard || return 1
  now; cordon_begin=$NOW
  [ -n "$mine" ] || { cordon_wait "$1" "$2"; return; }  # every node cordoned already, by someone else

  cordon_owner=$$; printf '%s %s%s\n' "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mine" > cordon.info
  printf '{"by": %s, "since": "%s", "action": "%s"}\n' "$(json_str "$j_by")" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$action" > cordon.by
  cordoned=1
  ( cordon_watch "$$" ) < /dev/null &  # before the cordon: from the first node cordoned, one is there to lift it
  cordon_set cordon "$mine" || { uncordon_ours refused; echo "FAILED curio: $(cordon_how Cordon) failed for one of$mine: nothing was stopped"; return 1; }
  tasks=$(node_tasks "$cuzk_tasks")
  line=$(printf '%s\n' "$tasks" | task_line CORDON "$cordon_begin"); say "$line"
  cordon_tasks=$(printf '%s\n' "$tasks" | awk -F: 'NF == 3 { o = o (o == "" ? "" : ", ") sprintf("{\"id\": %d, \"name\": \"%s\", \"age_s\": %d}", $1, $2, $3) }
    END { print "[" o "]" }')
  cordon_wait "$1" "$2"
}

# cordon_wait PID URL: one poll interval after the cordon, then until the nodes own no cuzk-backed task and
# the daemon has nothing in flight or queued; at drain_ms, what drain_timeout says (a PoSt task: refused)
cordon_wait() {
  now; [ -n "$cordon_begin" ] || cordon_begin=$NOW
  last=""
  while :; do
    now; waited=$(( NOW - cordon_begin ))
    if [ -n "$interrupted" ]; then uncordon_ours refused; echo "FAILED curio: interrupted while the node drained: nothing was stopped"; return 1; fi
    if [ "$waited" -ge "$poll_ms" ]; then
      tasks=$(node_tasks "$cuzk_tasks") || tasks="?:database:0"
      busy=$tasks
      if [ -n "$2" ]; then  # what the stop would lose, for the journal; nothing queued or in flight to go
        view=$(in_flight_line "$2" "$cordon_begin" "$1"); seen "$view" quiet
        case $view in "INFLIGHT "*" queue 0 0") ;; *) busy="$busy daemon" ;; esac
      fi
      [ -z "$busy" ] && { drain_cordon_ms=$waited; say "DRAINED $waited"; return 0; }
      [ "$tasks" != "$last" ] && [ -n "$tasks" ] && printf '%s\n' "$tasks" | task_line TASKS "$cordon_begin"; last=$tasks
      if [ "$waited" -ge "$drain_ms" ]; then
        drain_cordon_ms=$waited; echo "UNDRAINED $waited $(printf '%s\n' "$tasks" | grep -c .)"
        post=$(printf '%s\n' "$tasks" | grep -E ":($(printf '%s' "$post_tasks" | tr ',' '|')|database):" | tr '\n' ' ')
        if [ "$drain_fail" = refuse ] || [ -n "$post" ]; then
          uncordon_ours refused
          echo "FAILED drain: the node still owns ${post:+a PoSt task or what the database did not say ($post), which a swap never stops, or }work after $(( drain_ms / 1000 )) s and daemon.drain_timeout is \"$drain_fail\": nothing was stopped"
          return 1
        fi
        return 0
      fi
      sleep 0.8  # a reading a second at most: each is a database connection
    fi
    sleep 0.2
  done
}

# cordon_again PID: the nodes fed a new build that then failed: cordoned again (cordon.info rewritten) and,
# after one poll interval, until they own no cuzk-backed task, at most drain_ms; then the rollback goes on
# whatever they own (the build it stops fails its proofs anyway)
cordon_again() {
  printf '%s %s %s\n' "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mine" > cordon.info; uncordoned=""
  cordon_set cordon "$mine"
  now; again=$NOW
  while [ -n "$1" ] && alive "$1" && now && [ $(( NOW - again )) -lt "$drain_ms" ]; do
    [ $(( NOW - again )) -ge "$poll_ms" ] && got=$(node_tasks "$cuzk_tasks") && [ -z "$got" ] && break
    sleep 0.2
  done
  say "CORDON $(( NOW - again )) 0 again"
}

# cordon_json: JSON members for the journal line (nothing without a cordon)
cordon_json() {
  [ -n "$cordoned" ] && [ -n "$mine" ] || return 0
  printf ', "cordon": {"nodes": "%s", "cordon_s": %s, "drain_s": %s, "tasks_at_cordon": %s, "uncordoned": %s}' \
    "$(printf '%s' "$mine" | sed 's/^ //')" "$(ms_s "$cordon_ms")" "$(ms_s "$drain_cordon_ms")" "$cordon_tasks" \
    "${uncordoned:-false}"
}

# ms_s MS: milliseconds as seconds with three decimals, or null
ms_s() { if [ -n "$1" ]; then printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); else printf null; fi; }
