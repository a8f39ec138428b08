# shellcheck shell=sh
# Shell functions for a host script: `smi ARGS...` is nvidia-smi with a time limit ($smi_cs, in 1/100 s).
# Any script that calls nvidia-smi on the host should call it through this: a wedged GPU never answers.
# They set lim, o, p, end, rc, up and NOW_CS in the calling script.
# NOW_CS: the time since boot in 1/100 s (/proc/uptime always has two decimals), a clock that never steps
now_cs() { read -r up _ < /proc/uptime; NOW_CS=$(( ${up%.*} * 100 + 1${up#*.} - 100 )); }
# smi ARGS...: nvidia-smi ARGS, its output, then rc=N. One still running after smi_cs is killed with its
# children and not waited for: a GPU fallen off the bus (Xid 79) holds it in the driver, where even
# SIGKILL may wait. Its output goes to a file, so a lingering one keeps no hold on the SSH channel.
# shellcheck disable=SC2154 # smi_cs: an input of the script that includes this
smi() {
  lim="$(( smi_cs / 100 )).$(( smi_cs / 10 % 10 ))$(( smi_cs % 10 ))"
  if ! o=$(mktemp 2>/dev/null); then  # no room for a file (/tmp full): coreutils' timeout, which does wait
    timeout -k 1 "$lim" nvidia-smi "$@" 2>&1 < /dev/null; rc=$?  # for one stuck in the driver, but ends most
    case $rc in 124|137) echo; echo "rc=timeout $lim"; return 1;; esac
    echo "rc=$rc"; return 0
  fi
  nvidia-smi "$@" > "$o" 2>&1 < /dev/null &
  p=$!; now_cs; end=$(( NOW_CS + smi_cs ))
  while kill -0 "$p" 2>/dev/null; do
    now_cs
    if [ "$NOW_CS" -ge "$end" ]; then
      pkill -KILL -P "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
      rm -f -- "$o"; echo "rc=timeout $lim"; return 1
    fi
    sleep 0.02
  done
  wait "$p"; rc=$?; cat -- "$o"; rm -f -- "$o"; echo "rc=$rc"
}
