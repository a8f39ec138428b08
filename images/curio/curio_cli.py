"""The `curio` executable's stand-in (tests/curio_lab.py's install_curio puts it on a PATH as `curio`):

    curio [--db-host H] [--db-port P] [--db-name N] [--db-user U] [--db-password W] cli --machine HOST:PORT cordon
    curio ... cli --machine HOST:PORT uncordon
    curio ... run --listen HOST:PORT --layers L1,L2 ...      the node stand-in (images/curio/curio_node.py)

`cordon` and `uncordon` do what the real ones do through the node's JSON-RPC (cmd/curio/cordon.go:10-36):
`UPDATE harmony_machines SET unschedulable = $1 WHERE id = $2` (cmd/curio/rpc/rpc.go:376-390), for the
machine whose `host_and_port` is `--machine` (the `curio run --listen` address, cmd/curio/cli.go:38-41).
Without `--machine` the real CLI lists the machines and reads a choice from stdin (cli.go:59-101); this one
refuses in one line and exits 1, so a script that forgets it fails instead of hanging. The database is found
as the real curio finds it (cmd/curio/main.go:122-158): the global `--db-*` flags, else the CURIO_DB_*
(or CURIO_HARMONYDB_*) environment, else Curio's defaults (127.0.0.1:5433, yugabyte/yugabyte/yugabyte).
Its tables are in the schema `curio`, put on the connection's search_path as Curio's database layer does.
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

SCHEMA = "curio"
# flag: (environment variables, as main.go:122-158 lists them, first wins; Curio's default)
DB_FLAGS = {
    "db-host": (("CURIO_DB_HOST", "CURIO_HARMONYDB_HOSTS"), "127.0.0.1"),
    "db-name": (("CURIO_DB_NAME", "CURIO_HARMONYDB_NAME"), "yugabyte"),
    "db-user": (("CURIO_DB_USER", "CURIO_HARMONYDB_USERNAME"), "yugabyte"),
    "db-password": (("CURIO_DB_PASSWORD", "CURIO_HARMONYDB_PASSWORD"), "yugabyte"),
    "db-port": (("CURIO_DB_PORT", "CURIO_HARMONYDB_PORT"), "5433"),
}


class Refused(Exception):
    """One line for stderr, exit 1 (urfave/cli prints the error and exits 1)."""


def add_db_flags(parser: argparse.ArgumentParser) -> None:
    for flag, (envs, default) in DB_FLAGS.items():
        value = next((os.environ[e] for e in envs if os.environ.get(e)), default)
        parser.add_argument(f"--{flag}", default=value, help=f"{' / '.join(envs)}; default {default}")


def connect(args: argparse.Namespace) -> psycopg.Connection:
    """Curio's database from the flags; the first host of --db-host that answers (a comma-separated list)."""
    last: Exception | None = None
    for host in args.db_host.split(","):
        try:
            return psycopg.connect(host=host.strip(), port=args.db_port, dbname=args.db_name, user=args.db_user,
                                   password=args.db_password, options=f"-c search_path={SCHEMA}",
                                   autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            last = exc
    first = str(last).strip().splitlines()[0] if last else "no host"
    raise Refused(f"cannot reach Curio's database at {args.db_host}:{args.db_port}/{args.db_name}: {first}")


def set_unschedulable(args: argparse.Namespace, value: bool) -> None:
    if not args.machine:
        raise Refused("cli needs --machine HOST:PORT (the node's `curio run --listen` address): without it the "
                      "real curio lists harmony_machines and waits for a choice on stdin (cmd/curio/cli.go:59-101)")
    with connect(args) as db:
        row = db.execute("SELECT id FROM harmony_machines WHERE host_and_port = %s", (args.machine,)).fetchone()
        if row is None:
            raise Refused(f"no machine {args.machine} in harmony_machines (is `curio run --listen {args.machine}` up?)")
        db.execute("UPDATE harmony_machines SET unschedulable = %s WHERE id = %s", (value, row[0]))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="curio", description="stand-in for Curio's cordon CLI and node (tests/)")
    add_db_flags(ap)
    sub = ap.add_subparsers(dest="command", required=True)
    cli = sub.add_parser("cli", help="execute cli commands")
    cli.add_argument("--machine", default="", help="machine host:port (curio run --listen address)")
    verbs = cli.add_subparsers(dest="verb", required=True)
    verbs.add_parser("cordon", help="Cordon a machine, set it to maintenance mode")
    verbs.add_parser("uncordon", help="Uncordon a machine, resume scheduling")
    sub.add_parser("run", help="the node stand-in (images/curio/curio_node.py run --help)", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "run" in argv and "cli" not in argv[: argv.index("run")]:
        import curio_node  # the same directory: `curio run` is the node stand-in

        return curio_node.main(argv)
    args = parser().parse_args(argv)
    try:
        set_unschedulable(args, args.verb == "cordon")
    except Refused as exc:
        print(f"curio: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
