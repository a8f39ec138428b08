# shellcheck shell=bash
# swapctl's GPU sampler: records nvidia-smi's periodic output while one daemon process lives.
#
# Run by sampler-ctl.sh (start), detached (setsid, its own process group, every fd away from the SSH
# session), in its directory, as `swapctl-gpu-sampler`, its inputs by name in its environment:
# - pid: the daemon it follows, with that process's start time (a reused pid is not the daemon);
# - max: the bound in bytes on each kind's files: KEEP segments of max/KEEP, the oldest removed;
# - quiet: an nvidia-smi that prints nothing for this many seconds is hung: it is killed, and that is noted;
# - interval: dmon's -d; query: 1 to record --query-gpu=$fields every 500 ms as well.
# Segments are append-only and never renamed, so fetch-logs copies each one incrementally by name.
# It holds gpu-sampler.lock (fd 9) while it runs; nvidia-smi never inherits it, so a hung nvidia-smi
# (a driver fault can leave it unkillable) never keeps the next sampler out.
# Every event is one line in gpu-sampler.notes, where `gpu-sampler status` and fetch-logs read it.
export LC_ALL=C  # ${#line} counts bytes
: "${pid?}" "${max?}" "${quiet?}" "${interval?}" "${query?}" "${fields?}"
KEEP=4
seg=$(( max / KEEP )); [ "$seg" -ge 512 ] || seg=512
run=$(date -u +%Y%m%dT%H%M%SZ)

exec 9>>gpu-sampler.lock
flock -n 9 || exit 0  # another sampler runs: it is the one
trap '' HUP

note() { printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >> gpu-sampler.notes; }

# st: the start time of process $1 (field 22 of /proc/PID/stat; after the `(comm)` the state is the
# 1st), empty when it is gone or a zombie. A read in this shell, no process started: it runs every line.
# shellcheck disable=SC2086 # $s is split into the stat fields on purpose
started() { st=; s=; { read -r s < "/proc/$1/stat"; } 2>/dev/null; s=${s##*) }; set -- $s
            [ -n "$1" ] && [ "$1" != Z ] && st=${20}; }
started "$pid"; since=$st
if [ -z "$since" ]; then note "not started: the daemon (pid $pid) is not running"; exit 0; fi
alive() { started "$pid"; [ "$st" = "$since" ]; }

# ends nvidia-smi: TERM, then KILL after 3 s (on an H200 it took 0.5-1.5 s to exit after its reader
# went away: NVML's teardown). One stuck in the driver may outlive both; it is never waited on.
end_smi() {
  kill -TERM "$smi" 2>/dev/null
  smi_gone || kill -KILL "$smi" 2>/dev/null
}
smi_gone() {  # within 3 s; a zombie has exited
  i=0
  while [ "$i" -lt 30 ]; do started "$smi"; [ -z "$st" ] && return 0; sleep 0.1; i=$((i + 1)); done
  return 1
}

# record KIND PREFIX EXT ARGS...: nvidia-smi ARGS into PREFIX-RUN-NNNN.EXT segments
record() {
  kind=$1 prefix=$2 ext=$3; shift 3
  exec 3< <(exec env TZ=UTC nvidia-smi "$@" 2>&1 9>&-)
  smi=$!
  n=0; size=0; head=; inhead=; last=
  while :; do
    line=
    IFS= read -r -t "$quiet" -u 3 line; rc=$?
    if [ "$rc" -gt 128 ]; then
      kill -KILL "$smi" 2>/dev/null
      if alive; then
        note "$kind: nvidia-smi printed nothing for $quiet s: killed it (pid $smi); no $kind samples until the sampler is started again"
      else
        note "$kind: done: the daemon (pid $pid) exited"
      fi
      return
    fi
    if [ "$rc" -ne 0 ] && [ -z "$line" ]; then  # end of its output
      if alive; then  # it closed its output: its exit status says why, unless it hangs on (then KILL)
        if smi_gone; then wait "$smi"; code="exit $?"; else kill -KILL "$smi" 2>/dev/null; code="killed"; fi
        note "$kind: nvidia-smi ended ($code): ${last:-no output}; no $kind samples until the sampler is started again"
      else
        note "$kind: done: the daemon (pid $pid) exited"
      fi
      return
    fi
    if ! alive; then
      note "$kind: done: the daemon (pid $pid) exited"
      end_smi
      return
    fi
    [ -n "$line" ] && last=$line
    # the header goes at the top of every segment: dmon's '#' lines, query-gpu's first line
    hdr=1
    case $line in
      '#'*) if [ -n "$inhead" ]; then head="$head
$line"; else head=$line; inhead=1; fi ;;
      timestamp,*) head=$line; inhead= ;;
      *) inhead=; hdr= ;;
    esac
    len=$(( ${#line} + 1 ))
    # a new segment before a data row that would not fit (never between header lines); the oldest go
    # first, so that no more than KEEP exist at any time
    if [ "$n" -eq 0 ] || { [ -z "$hdr" ] && [ $(( size + len )) -gt "$seg" ]; }; then
      set -- "$prefix"-*."$ext"
      while [ "$#" -ge "$KEEP" ]; do rm -f -- "$1"; shift; done
      n=$(( n + 1 ))
      file=$(printf '%s-%s-%04d.%s' "$prefix" "$run" "$n" "$ext")
      exec 4>>"$file"
      size=0
      if [ -z "$hdr" ] && [ -n "$head" ]; then printf '%s\n' "$head" >&4; size=$(( ${#head} + 1 )); fi
    fi
    printf '%s\n' "$line" >&4
    size=$(( size + len ))
  done
}

printf '%s %s %s %s\n' "$$" "$pid" "$since" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > gpu-sampler.pid.tmp &&
  mv -f gpu-sampler.pid.tmp gpu-sampler.pid
if [ "$max" -ge 1048576 ]; then bound="$(( max / 1048576 )) MiB"; else bound="$max bytes"; fi
note "started: following the daemon (pid $pid), at most $bound of each kind of samples"
# The GPU's activity counters (GPM: Hopper and later, driver 525 on), in dmon's rows beside the duty
# cycle: 2 SM activity, 3 SM occupancy, 20/21 PCIe TX/RX (NVML's nvmlGpmMetricId_t). One short dmon
# says whether this GPU and driver have them; where not, the notes say so once and dmon runs without.
GPM=2,3,20,21
gpm=$(env TZ=UTC timeout -k 2 "$quiet" nvidia-smi dmon -s ut --gpm-metrics "$GPM" -c 1 2>&1 9>&-); rc=$?
if [ "$rc" -eq 0 ] && printf '%s\n' "$gpm" | grep -q '^#.*GPM:'; then
  note "dmon: with the GPU's activity counters (--gpm-metrics $GPM: SM activity, SM occupancy, PCIe TX/RX)"
  record dmon gpu-samples dmon dmon -s ut --gpm-metrics "$GPM" -d "$interval" -o DT &
else
  why=$(printf '%s\n' "$gpm" | grep -v '^#' | grep -m 1 .)
  note "dmon: no GPU activity counters here (dmon --gpm-metrics: exit $rc, ${why:-no output}): duty cycle only, no SM activity"
  record dmon gpu-samples dmon dmon -s ut -d "$interval" -o DT &
fi
if [ "$query" = 1 ]; then
  record query gpu-query csv --query-gpu="$fields" --format=csv -lms 500 &
fi
wait
