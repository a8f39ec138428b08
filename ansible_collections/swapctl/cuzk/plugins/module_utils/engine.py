# The swap on the host itself, for the collection's modules: the steps `swapctl deploy` runs, in its order
# (lock, inspect, release, adopt, swap, prune), through swapctl's own host scripts and parsers, which
# scripts/build_collection.py ships beside this file (module_utils/swapctl/). The host's swap.sh rolls a
# failed start back and writes the journal line itself; this side reads its OUTCOME and JOURNAL. The swap
# script's inputs come from the swap core both sides call (swapctl/swap/inputs.py, with the playbook's own
# types, playbook/spec.py), and so do the daemon rule (facts/daemon_rule.py), the way back of a failed start
# (releases.way_back), the room a deploy needs (inputs.room_needed_kib), and the command a release runs with
# (swap/command.py: a new build's, a release's with no record of its own, the swap script's command line).
# What the controller knows that a module does not: a systemd unit's ExecStart (the controller's preflight
# starts what `systemctl start` will run; the modules take daemon.unit as given).
#
# This module is what the modules and the tests call; each part lives in its own room:
#   settings.py     the modules' options as Settings, checked; HostError
#   hostrun.py      running the host scripts here; the deploy lock
#   situation.py    what runs (the daemon rule) and what the host has
#   plan.py         the release a deploy makes, the fallback, a release's command and environment
#   steps.py        the swap's steps; the swap and rollback modules' entry points
#   host_status.py  the status module's fact
from __future__ import annotations

from ansible_collections.swapctl.cuzk.plugins.module_utils.host_status import status
from ansible_collections.swapctl.cuzk.plugins.module_utils.plan import swap_inputs
from ansible_collections.swapctl.cuzk.plugins.module_utils.settings import PROOF_LOG, HostError, Settings
from ansible_collections.swapctl.cuzk.plugins.module_utils.situation import Daemon
from ansible_collections.swapctl.cuzk.plugins.module_utils.steps import deploy, find_release, rollback
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.daemon_rule import daemon_rule
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.releases import Release, matching
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.facts.sections import split_sections
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.remote.cmd import Secret

__all__ = ["PROOF_LOG", "Daemon", "HostError", "Release", "Secret", "Settings", "daemon_rule", "deploy",
           "find_release", "matching", "rollback", "split_sections", "status", "swap_inputs"]
