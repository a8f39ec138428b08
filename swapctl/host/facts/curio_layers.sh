#!/bin/sh
# The [Cuzk] Address of a running `curio run`'s config layers: which cuzk that node feeds (`init --from`
# writes as [curio] nodes only the nodes that feed the daemon it adopts; docs/curio.md). Read from
# harmony_config (`curio config set` stores each layer's TOML there) with the database settings that process
# runs with, its CURIO_DB_* / CURIO_HARMONYDB_* environment (cmd/curio/main.go:122-158), on the host: no
# credential leaves it. The environment's values are quoted, never evaluated.
# Inputs: pid (the curio process, one the daemon rule accepts), layers ("base," then its --layers, checked
# words, comma-separated; "base" alone: its CURIO_LAYERS then, as urfave/cli reads it, cmd/curio/run.go:62),
# curio_sql (a psql client).
# Prints: LAYERS base,...           the layers read (CURIO_LAYERS's words kept only as layer names)
#         LAYER title address|-     each of them that names a [Cuzk] Address (-: an empty one, cuzk off)
#         HOSTADDR address          each address of this host (hostname -I) and its name: what reaches it
#         DB ok|failed|nosql        whether the database answered
: "${pid?}" "${layers?}" "${curio_sql?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=curio.sh
. ./curio.sh

if [ "$layers" = base ]; then
  from_env=$(tr '\000' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^CURIO_LAYERS=//p' | head -n 1 |
    tr ',' '\n' | grep -E '^[A-Za-z0-9_.-]{1,64}$' | tr '\n' ',')
  layers="base,${from_env%,}"; layers=${layers%,}
fi
echo "LAYERS $layers"
{ hostname -I 2>/dev/null | tr ' ' '\n'; hostname 2>/dev/null; } | grep -E '^[0-9A-Za-z.:-]{1,253}$' | sed 's/^/HOSTADDR /'
curio_sqlp=$(curio_find "$curio_sql") || { echo "DB nosql"; exit 0; }
# NAME='VALUE' for each database variable of the process, a quote in VALUE closed and reopened (curio_run's)
# shellcheck disable=SC2034
curio_env=$(tr '\000' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -E '^CURIO_(DB|HARMONYDB)_[A-Z]+=' |
  sed "s/'/'\\\\''/g; s/=/='/; s/\$/'/")
# each layer's Address: '-' where it is empty (cuzk off there), nothing where the layer names none
got=$(curio_run "$curio_sqlp" -XAtq -F ' ' -v ON_ERROR_STOP=1 -c "SELECT title, CASE a WHEN '' THEN '-' ELSE a END
  FROM (SELECT title, substring(config from '\\[Cuzk\\][^\\[]*?Address\\s*=\\s*\"([^\"]*)\"') AS a
  FROM curio.harmony_config WHERE title IN ($(sql_list "$layers"))) AS l" -c "select 'answered'" 2>/dev/null |
  tr -cd '0-9A-Za-z_.:/\[\] \n-' | head -1001)
[ "${got##*
}" = answered ] || { echo "DB failed"; exit 0; }
printf '%s\n' "$got" | sed '$d' | awk 'NF == 2 { print "LAYER " $1 " " $2 }'
echo "DB ok"
