# shellcheck shell=sh
# Stopping a daemon and waiting for its memory: the stop script and the swap script include this file.
# Needs lib.sh (alive, now); the memory wait asks nvidia-smi through smi.sh's bounded smi ($smi_cs).
# Report words: see swapctl/swap/words.py.
. ./smi.sh
. ./cgroup.sh

# stop_daemon PID GRACE_MS GROUP UNIT: SIGTERM (its process group too when GROUP is 1; `systemctl stop`
# when it runs under UNIT), SIGKILL after GRACE_MS. Notes its descendants first, in WATCH, for the
# memory wait. Prints KIDS pids, SIGKILL, STOPPED ms.
stop_daemon() {
  victim=$1; grace=$2; leads=$3; its_unit=$4
  if [ "${victim:-0}" = 0 ]; then  # a unit's MainPID once its daemon exited: only the unit to stop
    echo "KIDS "; [ -n "$its_unit" ] && systemctl stop -- "$its_unit" 2>&1 | sed 's/^/LOG /'
    echo "STOPPED 0"; WATCH=""; return 0
  fi
  kids=$(ps -eo pid=,ppid= | awk -v root="$victim" '{p[$1]=$2} END {for (x in p) {y=p[x]; while (y in p && y != root && y > 1) y=p[y]; if (y == root) printf "%s ", x}}')
  echo "KIDS $kids"
  now; begin=$NOW
  if [ -n "$its_unit" ]; then systemctl stop -- "$its_unit" 2>&1 | sed 's/^/LOG /'; fi
  kill -TERM "$victim" 2>/dev/null
  [ "$leads" = 1 ] && kill -TERM -- "-$victim" 2>/dev/null
  while alive "$victim"; do
    now
    if [ $(( NOW - begin )) -ge "$grace" ]; then
      echo SIGKILL
      kill -KILL "$victim" 2>/dev/null
      [ "$leads" = 1 ] && kill -KILL -- "-$victim" 2>/dev/null
      break
    fi
    sleep 0.01
  done
  while alive "$victim"; do sleep 0.01; done
  now; echo "STOPPED $(( NOW - begin ))"
  WATCH="$victim $kids"
}

# start_unit UNIT RESET: `systemctl start UNIT`, whose ExecStart runs the binary path (the release now);
# with RESET 1 then `systemctl reset-failed UNIT`, as a rollback clears the failed start's record. Sets
# new (its MainPID: 0 when it has exited already) and inv (its InvocationID: its lines in the journal). Prints FAILED and returns 1 when systemctl refuses.
start_unit() {
  # shellcheck disable=SC2034 # since: read by the script that includes this file (its journal lines)
  since=$(date +@%s.%6N)
  said=$(systemctl start -- "$1" 2>&1) || { echo "FAILED systemctl start $1: $(printf '%s' "$said" | tr '\n' ' ')"; return 1; }
  # shellcheck disable=SC2034 # new, inv: read by the script that includes this file
  new=$(systemctl show -p MainPID --value -- "$1")
  # shellcheck disable=SC2034
  inv=$(systemctl show -p InvocationID --value -- "$1")
  [ "$2" = 1 ] && systemctl reset-failed -- "$1" 2>/dev/null
  return 0
}

# hold_unit UNIT: `systemctl stop UNIT` once its daemon exited unready: its Restart= would start the failed
# build again and again while swapctl rolls back (systemd counts a crash as a failure, and a stop cancels
# the pending restart).
hold_unit() { systemctl stop -- "$1" 2>&1 | sed 's/^/LOG /'; }

# gpu_ok LIMITS USED: whether each GPU uses at most its limit ("index:mib,..." against "index,mib;...").
gpu_ok() {
  [ -z "$1" ] && return 0
  printf '%s\n' "$2" | tr ';' '\n' | awk -F, -v t="$1" '
    BEGIN { k = split(t, a, ","); for (i = 1; i <= k; i++) { split(a[i], b, ":"); max[b[1]] = b[2] } }
    ($1 in max) && $2 + 0 > max[$1] + 0 { bad = 1 } END { exit bad }'
}

# wait_memory TIMEOUT_MS MIN_KIB GPU_MAX: until the pids in WATCH are gone, GPU memory is back under
# GPU_MAX and what the daemon started next gets, the least of MemAvailable and its cgroup's room
# (cgroup.sh's cg_target: $unit's cgroup, else this script's), is >= MIN_KIB. Prints readings
# `R ms avail_kib[/room_kib] alive gpu_used` (room only under a cgroup limit; alive: pids joined by
# commas, or - for none; gpu_used only when GPUs are watched), then DONE ms or TIMEOUT ms (and returns 1).
wait_memory() {
  limit_ms=$1; need_kib=$2; gpu_limits=$3
  now; begin=$NOW; n=0; used=""; cg=""; cg_target "${unit:-}" && cg=1
  while :; do
    left=""; for p in $WATCH; do alive "$p" && left="$left,$p"; done
    avail=; while read -r key kib _; do [ "$key" = MemAvailable: ] && avail=$kib && break; done < /proc/meminfo
    gets=$avail; room=""
    if [ -n "$cg" ]; then cg_walk; [ "$CG_ROOM" = - ] || room=$CG_ROOM; fi
    [ -n "$room" ] && [ "$room" -lt "$gets" ] && gets=$room
    if [ -n "$gpu_limits" ] && [ $((n % 10)) -eq 0 ]; then
      # bounded: a GPU that falls off the bus as its daemon dies must not hold the swap here for ever;
      # unanswered, no reading (the GPUs count as released: the host has nothing better to go by)
      used=$(smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>/dev/null | grep -v '^rc=' |
             tr -d ' ' | paste -sd';')
    fi
    now; ms=$(( NOW - begin )); holding=${left#,}
    avail=$avail${room:+/$room}
    if [ -z "$left" ] && [ "$gets" -ge "$need_kib" ] && gpu_ok "$gpu_limits" "$used"; then
      echo "R $ms $avail - $used"; echo "DONE $ms"; return 0
    fi
    [ $((n % 20)) -eq 0 ] && echo "R $ms $avail ${holding:--} $used"
    if [ "$ms" -ge "$limit_ms" ]; then echo "R $ms $avail ${holding:--} $used"; echo "TIMEOUT $ms"; return 1; fi
    sleep 0.01; n=$((n+1))
  done
}
