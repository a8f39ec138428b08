# shellcheck shell=sh
# Shell functions for a host script: the memory cgroup a process runs in, and the room it leaves. A container
# without LXCFS shows the host's /proc/meminfo, so MemAvailable can read 400 GB where the cgroup's limit leaves
# 100: what a daemon gets is the least of MemAvailable and, for its cgroup and each one above it, the limit
# less what is in use there. cgroup v2 (memory.max, memory.current, memory.events), else v1's memory
# hierarchy (memory.limit_in_bytes, memory.usage_in_bytes, memory.oom_control) where that is all there is.
# Every file is the host's (or a container's) text: a value that is no whole number of at most 18 digits
# ("max", v1's 9223372036854771712, garbage, a missing file) is "-", no limit or not known. Sizes in KiB.
# They set CG_* and cg_* variables in the calling script; swapctl.facts.cgroup parses what cg_report prints.
cg_root=/sys/fs/cgroup

# cg_read FILE: CG_N, the file's first word in KiB, else -
cg_read() {
  CG_N=-; cg_w=""
  { read -r cg_w _ < "$1"; } 2>/dev/null
  case $cg_w in '' | *[!0-9]*) ;; *) [ ${#cg_w} -le 18 ] && CG_N=$(( cg_w / 1024 )) ;; esac
}

# cg_of PID: CG_V (v1 | v2), CG_BASE (the hierarchy's mount) and CG_PATH (PID's cgroup in it, from
# /proc/PID/cgroup); returns 1 when it has none that can be read, or a name outside what cgroups are named with
cg_of() {
  CG_V=""; CG_PATH=""; cg_v1=""; cg_v2=""
  { while IFS=: read -r _ cg_ctl cg_p; do
      case ",$cg_ctl," in *,memory,*) cg_v1=$cg_p ;; ,,) cg_v2=$cg_p ;; esac
    done < "/proc/$1/cgroup"; } 2>/dev/null
  if [ -n "$cg_v1" ] && [ -f "$cg_root/memory/memory.usage_in_bytes" ]; then
    CG_V=v1; CG_BASE=$cg_root/memory; CG_PATH=$cg_v1
  elif [ -n "$cg_v2" ] && [ -f "$cg_root/cgroup.controllers" ]; then
    CG_V=v2; CG_BASE=$cg_root; CG_PATH=$cg_v2
  else
    return 1
  fi
  cg_at "$CG_PATH"
}

# cg_at PATH: CG_DIR, PATH's directory under CG_BASE, else its nearest one that exists (a container's view
# without a cgroup namespace names the host's path; a stopped unit's cgroup is gone, its slice's is not)
cg_at() {
  case $1 in /*) ;; *) CG_V=""; return 1 ;; esac
  # systemd escapes what else it would put in a name as \xNN: a space, a newline or `..` is no cgroup's
  case $1 in *[!A-Za-z0-9_.:@/+=,\\-]* | */../* | */.. | *//*) CG_V=""; return 1 ;; esac
  CG_DIR=$CG_BASE${1%/}
  while [ "$CG_DIR" != "$CG_BASE" ] && [ ! -d "$CG_DIR" ]; do CG_DIR=${CG_DIR%/*}; done
}

# cg_walk [PRINT]: CG_LIMIT and CG_ROOM (KiB, or - for none) of CG_DIR and every cgroup above it, and
# CG_EXTRA (a limit of KiB with nothing in use: a stopped unit's MemoryMax, or -); with PRINT 1, a line
# `mem PATH MAX CURRENT` for each
cg_walk() {
  cg_d=$CG_DIR; CG_LIMIT=-; CG_ROOM=-
  cg_limit "${CG_EXTRA:--}" -
  while :; do
    if [ "$CG_V" = v2 ]; then cg_read "$cg_d/memory.max"; cg_m=$CG_N; cg_read "$cg_d/memory.current"
    else cg_read "$cg_d/memory.limit_in_bytes"; cg_m=$CG_N; cg_read "$cg_d/memory.usage_in_bytes"; fi
    cg_limit "$cg_m" "$CG_N"
    cg_rel=${cg_d#"$CG_BASE"}
    [ "${1:-}" = 1 ] && echo "mem ${cg_rel:-/} $cg_m $CG_N"
    [ "$cg_d" = "$CG_BASE" ] && break
    cg_d=${cg_d%/*}
  done
}

# cg_limit MAX CURRENT: one level's limit and what is in use there into CG_LIMIT and CG_ROOM
cg_limit() {
  [ "$1" = - ] && return 0
  { [ "$CG_LIMIT" = - ] || [ "$1" -lt "$CG_LIMIT" ]; } && CG_LIMIT=$1
  cg_r=$1; [ "$2" = - ] || cg_r=$(( $1 - $2 )); [ "$cg_r" -lt 0 ] && cg_r=0
  { [ "$CG_ROOM" = - ] || [ "$cg_r" -lt "$CG_ROOM" ]; } && CG_ROOM=$cg_r
  return 0
}

# cg_events: `events PATH OOM OOM_KILL` of CG_DIR (v1 counts no oom events, only kills: OOM is -)
cg_events() {
  cg_o=-; cg_k=-
  if [ "$CG_V" = v2 ]; then cg_f=$CG_DIR/memory.events; else cg_f=$CG_DIR/memory.oom_control; fi
  { while read -r cg_key cg_n _; do
      case $cg_n in '' | *[!0-9]*) continue ;; esac
      [ ${#cg_n} -le 18 ] || continue
      case $cg_key in oom) cg_o=$cg_n ;; oom_kill) cg_k=$cg_n ;; esac
    done < "$cg_f"; } 2>/dev/null
  [ "$CG_V" = v2 ] || cg_o=-
  cg_rel=${CG_DIR#"$CG_BASE"}
  echo "events ${cg_rel:-/} $cg_o $cg_k"
}

# cg_report: for each `LABEL PID` line on stdin, `LABEL PID VERSION PATH` (or `LABEL PID -`), and for each
# cgroup named the first time, its `mem` lines (cg_walk) and its `events` line
cg_report() {
  cg_seen=" "
  while read -r cg_label cg_pid; do
    case $cg_pid in '' | *[!0-9]*) continue ;; esac
    CG_EXTRA=-
    if ! cg_of "$cg_pid"; then echo "$cg_label $cg_pid -"; continue; fi
    cg_rel=${CG_DIR#"$CG_BASE"}
    echo "$cg_label $cg_pid $CG_V ${cg_rel:-/}"
    case $cg_seen in *" $CG_V:$CG_DIR "*) continue ;; esac
    cg_seen="$cg_seen$CG_V:$CG_DIR "
    cg_walk 1; cg_events
  done
}

# cg_unit_path UNIT: where systemd puts UNIT's cgroup: under its slice (a-b.slice in a.slice), else the root
cg_unit_path() {
  cg_s=$(systemctl show -p Slice --value -- "$1" 2>/dev/null); cg_up=""; cg_acc=""
  case $cg_s in
    '' | -.slice) ;;
    *.slice) for cg_w in $(printf '%s\n' "${cg_s%.slice}" | tr '-' ' '); do
        cg_acc=${cg_acc:+$cg_acc-}$cg_w; cg_up="$cg_up/$cg_acc.slice"; done ;;
  esac
  echo "$cg_up/$1"
}

# cg_target UNIT: the cgroup a daemon started now runs in (CG_V, CG_BASE, CG_DIR, CG_EXTRA): UNIT's, where
# systemd places it (its MemoryMax counts while the unit is stopped and its cgroup gone), else this script's
# own, since a child stays in its parent's cgroup; returns 1 when there is none to read
cg_target() {
  CG_EXTRA=-
  cg_of "$$" || return 1
  if [ -z "$1" ] || ! command -v systemctl >/dev/null 2>&1; then return 0; fi
  cg_at "$(cg_unit_path "$1")" || return 1
  cg_w=$(systemctl show -p MemoryMax --value -- "$1" 2>/dev/null)
  case $cg_w in '' | *[!0-9]*) ;; *) [ ${#cg_w} -le 18 ] && CG_EXTRA=$(( cg_w / 1024 )) ;; esac
}
