#!/bin/sh
# Holds the host's deploy lock for as long as this command's stdin stays open: the lock dies with the
# SSH connection, so a killed swapctl never leaves a stale lock.
# Inputs: dir (the state directory), info (who takes it, JSON). Prints FAILED why, UNSAFE dir owner mode,
# SWAPPING, LOCKED or HELD info.
: "${dir?}" "${info?}"
# a full or read-only disk: say so (a failed `exec 9>>` would end the shell without a word)
# shellcheck disable=SC2174 # 700 for the state directory and releases/; the parents are the host's
why=$(mkdir -p -m 700 -- "$dir" "$dir/releases" 2>&1 && true 2>&1 >>"$dir/lock") ||
  { echo "FAILED $why" | head -n 1; exit 0; }
# a state directory someone else may write to is refused: they could swap a release or its manifest
# shellcheck source=lib.sh
. ./lib.sh
bad=$(unsafe_dirs "${dir%/*}" "$dir" "$dir/releases")
[ -z "$bad" ] || { echo "UNSAFE $bad" | head -n 1; exit 0; }
umask 077
exec 9>>"$dir/lock"
if flock -n 9; then
  # a swap whose deploy lost its connection runs on (swap.sh holds swap.lock): never start another beside it
  if ! flock -n "$dir/swap.lock" true; then echo SWAPPING; exit 0; fi
  printf '%s\n' "$info" > "$dir/lock.info"
  echo LOCKED
  exec cat >/dev/null
fi
printf 'HELD %s\n' "$(cat -- "$dir/lock.info" 2>/dev/null)"
