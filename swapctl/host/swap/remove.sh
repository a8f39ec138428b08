#!/bin/sh
# Removes each argument (release directories, stale partial uploads) that is one of $state/releases/NAME
# or $state/releases/.upload-NAME, NAME a release id: a name read back from the host never reaches rm -rf
# unless it is one of those.
: "${state?}"
# shellcheck source=lib.sh
. ./lib.sh
for d; do
  case $d in
    "$state"/releases/.upload-*) release_id "${d#"$state"/releases/.upload-}" && rm -f -- "$d" ;;
    "$state"/releases/*) release_id "${d#"$state"/releases/}" && rm -rf -- "$d" ;;
    *) echo "swapctl: not removing $d (outside $state/releases)" >&2 ;;
  esac
done
exit 0
