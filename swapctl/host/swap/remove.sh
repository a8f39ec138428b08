#!/bin/sh
# Removes each argument (release directories, stale partial uploads) that is one of $state/releases/NAME
# or $state/releases/.upload-NAME, NAME a release id: a name read back from the host never reaches rm -rf
# unless it is one of those.
: "${state?}"
# shellcheck source=lib.sh
. ./lib.sh
# in the state directory, entered once (enter_state): what is removed is root's, whatever is renamed meanwhile
enter_state "$state"; case $? in 0) ;; 2) exit 0 ;; *) echo "swapctl: removing nothing: $unsafe (not a directory only root may change)" >&2; exit 1 ;; esac
for d; do
  case $d in
    "$state"/releases/.upload-*) release_id "${d#"$state"/releases/.upload-}" && rm -f -- "releases/${d##*/}" ;;
    "$state"/releases/*) release_id "${d#"$state"/releases/}" && rm -rf -- "releases/${d##*/}" ;;
    *) echo "swapctl: not removing $d (outside $state/releases)" >&2 ;;
  esac
done
exit 0
