#!/bin/sh
# The cordon as the host sees it, and a cordon swapctl left lifted (issue 43; docs/curio.md "Status, plan and
# uncordon"): what `status`, the deploy plan and `swapctl uncordon` read, in one call. A cordon.info in the
# state directory while no swap runs (swap.lock is free) is a cordon whose swap script died before it could
# lift it; with lift=1 its nodes are uncordoned, with swap.lock held meanwhile so that no swap begins then.
# Inputs: dir (the state directory), lift (1: lift a cordon of swapctl's; empty: only read), cordon_nodes (the
# playbook's [curio] nodes), curio_via, curio_cli, curio_sql, curio_env (stdin only), cuzk_tasks (comma-separated).
# Prints, in this order (each value as read; swapctl/facts/cordon.py parses them, trusting none):
#   STATE none|idle|swapping|unsafe   no state directory; a swap may begin; a swap runs now; not root's alone
#   INFO pid since node...            cordon.info: a cordon of swapctl's (its swap's pid, since when, its nodes)
#   BY {json}                         cordon.by: who ran that swap, since when, which action
#   LIFTED ok|failed|refused|nocli node...  what lift did (refused: a word that is no host:port; nocli: no curio,
#                                     or with curio_via=api no curl)
#   FLAG node true|false              each playbook node's harmony_machines.unschedulable
#   DB ok|failed|nosql                whether the harmony database answered (nosql: no curio.sql on the host)
#   TASK id:name:age_s                each cuzk task the nodes own now
: "${dir?}" "${lift?}" "${cordon_nodes?}" "${curio_via?}" "${curio_cli?}" "${curio_sql?}" "${curio_env?}" "${cuzk_tasks?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=curio.sh
. ./curio.sh
say() { printf '%s\n' "$*"; }

curio_clip=$(cordon_tool) || curio_clip=""
curio_sqlp=$(curio_find "$curio_sql") || curio_sqlp=""

enter_state "$dir"; entered=$?
if [ $entered = 2 ]; then echo "STATE none"
elif [ $entered != 0 ]; then echo "STATE unsafe"
else
  exec 7>>swap.lock
  if flock -n 7; then held=1; echo "STATE idle"; else held=""; echo "STATE swapping"; fi
  [ -f cordon.info ] && printf 'INFO %s\n' "$(head -c 2048 cordon.info | head -n 1 | tr -cd '0-9A-Za-z_.:[] -')"
  [ -f cordon.by ] && printf 'BY %s\n' "$(head -c 2048 cordon.by | head -n 1 | tr -d '\000-\037')"
  if [ "$lift" = 1 ] && [ -f cordon.info ] && [ -n "$held" ]; then
    read -r _ _ nodes < cordon.info 2>/dev/null
    bad=""
    for n in $nodes; do case $n in -* | *[!0-9A-Za-z_.:\[\]-]*) bad=1 ;; esac; done
    if [ -n "$bad" ]; then echo "LIFTED refused $nodes"
    elif [ -z "$curio_clip" ]; then echo "LIFTED nocli $nodes"
    else uncordon_ours lifted >/dev/null; echo "LIFTED $([ "$uncordoned" = true ] && echo ok || echo failed) $nodes"; fi
  fi
  exec 7>&-
fi

[ -n "$cordon_nodes" ] || exit 0
[ -n "$curio_sqlp" ] || { echo "DB nosql"; exit 0; }
node_flags | grep -vx answered | sed 's/^/FLAG /'
if got=$(node_tasks "$cuzk_tasks"); then echo "DB ok"; printf '%s\n' "$got" | sed '/^$/d; s/^/TASK /'
else echo "DB failed"; fi
