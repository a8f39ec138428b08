#!/bin/sh
# The [Cuzk] Address of a running `curio run`'s config layers: which cuzk that node feeds (`init --from`
# writes as [curio] nodes only the nodes that feed the daemon it adopts; docs/curio.md). Read from
# harmony_config (`curio config set` stores each layer's TOML there) with the database settings that process
# runs with, its CURIO_DB_* / CURIO_HARMONYDB_* environment (cmd/curio/main.go:122-158), on the host: no
# credential leaves it. The environment's values are quoted, never evaluated.
# Inputs: pid (the curio process, one the daemon rule accepts), layers (its --layers, checked words, comma-
# separated), curio_sql (a psql client).
# Prints: LAYER title address   each of its layers that names a [Cuzk] Address, in harmony_config's order
#         DB ok|failed|nosql     whether the database answered
: "${pid?}" "${layers?}" "${curio_sql?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=curio.sh
. ./curio.sh

curio_sqlp=$(curio_find "$curio_sql") || { echo "DB nosql"; exit 0; }
# NAME='VALUE' for each database variable of the process, a quote in VALUE closed and reopened (curio_run's)
# shellcheck disable=SC2034
curio_env=$(tr '\000' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -E '^CURIO_(DB|HARMONYDB)_[A-Z]+=' |
  sed "s/'/'\\\\''/g; s/=/='/; s/\$/'/")
got=$(curio_run "$curio_sqlp" -XAtq -F ' ' -v ON_ERROR_STOP=1 -c "SELECT title, COALESCE(substring(config from
  '\\[Cuzk\\][^\\[]*?Address\\s*=\\s*\"([^\"]*)\"'), '') FROM curio.harmony_config WHERE title IN
  ($(sql_list "$layers"))" -c "select 'answered'" 2>/dev/null | tr -cd '0-9A-Za-z_.:/\[\] \n-' | head -1001)
[ "${got##*
}" = answered ] || { echo "DB failed"; exit 0; }
printf '%s\n' "$got" | sed '$d' | awk 'NF == 2 { print "LAYER " $1 " " $2 }'
echo "DB ok"
