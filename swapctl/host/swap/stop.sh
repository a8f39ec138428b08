#!/bin/sh
# Stops a daemon swapctl started (it leads its process group) and nothing more: a failed start with
# nothing to go back to. Inputs: pid, grace_ms, unit (the systemd unit it runs under, or empty). Prints as
# stop_daemon.
: "${pid?}" "${grace_ms?}" "${unit?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=daemon.sh
. ./daemon.sh
stop_daemon "$pid" "$grace_ms" 1 "$unit"
