#!/bin/sh
# Holds the host's deploy lock while its deploy's heartbeat comes: a byte on this command's stdin every few
# seconds. Its end (EOF: the deploy ended, or its connection did) or `silence` seconds without a byte end
# the lock: a controller SIGSTOPped, or whose link went silent, can leave a connection the host's TCP
# keepalive notices only hours later, and the lock would be stale until then.
# Inputs: dir (the state directory), info (who takes it, JSON), silence (seconds), user (daemon.user: may
# own the binary's directory and those above it; empty: root only). Prints FAILED why, UNSAFE dir owner
# mode, SWAPPING, LOCKED or HELD seconds-silent info.
: "${dir?}" "${info?}" "${silence?}" "${user?}"
# shellcheck source=lib.sh
. ./lib.sh
# whoever may rename the binary's directory or one above it can put their own state tree there: checked
# before anything is made in it
bad=$(unsafe_path "${dir%/.swapctl/*}" "$( [ -n "$user" ] && id -u -- "$user" 2>/dev/null)")
[ -z "$bad" ] || { echo "UNSAFE $bad" | head -n 1; exit 0; }
# a full or read-only disk: say so (a failed `exec 9>>` would end the shell without a word). The state tree is
# made a level at a time, then entered once: every path below is relative to it, the heartbeat's too, so that
# a rename of .swapctl by the owner of the binary's directory, while the lock is held, redirects nothing
why=$(make_state "$dir" 2>&1) || { echo "FAILED $why" | head -n 1; exit 0; }
# a state directory someone else may write to is refused: they could swap a release or its manifest
enter_state "$dir" || { echo "UNSAFE $unsafe" | head -n 1; exit 0; }
why=$(true 2>&1 >>lock) || { echo "FAILED $why" | head -n 1; exit 0; }
umask 077
exec 9>>lock
if flock -n 9; then
  # a swap whose deploy lost its connection runs on (swap.sh holds swap.lock): never start another beside it
  if ! flock -n swap.lock true; then printf 'SWAPPING %s\n' "$(head -c 4096 -- swap.info 2>/dev/null)"; exit 0; fi
  printf '%s\n' "$info" > lock.info
  : > lock.beat  # its mtime: the last heartbeat, for the deploy this lock refuses
  echo LOCKED
  # one byte at a time (head -c 1): EOF and silence both read as nothing. The children do not hold the lock.
  while [ "$(timeout "$silence" head -c 1 9>&- | wc -c)" -gt 0 ]; do touch -- lock.beat 2>/dev/null; done
  exit 0
fi
beat=$(stat -c %Y -- lock.beat 2>/dev/null) && silent=$(( $(date +%s) - beat )) || silent=-
printf 'HELD %s %s\n' "$silent" "$(cat -- lock.info 2>/dev/null)"
