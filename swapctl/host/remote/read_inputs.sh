# shellcheck shell=sh
# Put by the loader (swapctl.host.scripts) before a script that has named inputs: reads the block Cmd.feed
# sends on stdin, its line count, then that many lines of `name='value'`, quoted once by shlex.quote. `read`
# takes no byte past its line, so what follows on stdin stays for the script (receive.sh's GO and stream,
# lock.sh's open end). The inputs are shell variables, not exported.
IFS= read -r swapctl_n || { echo "swapctl: no inputs on stdin" >&2; exit 2; }
swapctl_in=
while [ "$swapctl_n" -gt 0 ]; do
  IFS= read -r swapctl_l || { echo "swapctl: inputs cut short" >&2; exit 2; }
  swapctl_in="$swapctl_in$swapctl_l
"
  swapctl_n=$((swapctl_n - 1))
done
eval "$swapctl_in"
unset swapctl_n swapctl_l swapctl_in
