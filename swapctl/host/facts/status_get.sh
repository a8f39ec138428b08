# shellcheck shell=sh
# status_get URL: the body of GET URL on stdout (the daemon's own view, daemon.status_url, read on the host:
# no port opens to the controller). curl where there is one (every GPU box we know has it), else wget, else
# python3; none of them: says so on stderr and returns 2. 2 s for the whole answer, as curl's -m 2: wget's
# -T and python's timeout bound each read, not the call, and a server that sent a byte a second (any user can
# listen on the port while the daemon is down) held status to its own deadline, which it then failed. What
# went wrong goes to stderr: status.sh shows it, drain.sh drops it. Included by status.sh and drain.sh.
status_get() {
  if command -v curl >/dev/null 2>&1; then curl -fsS -m 2 -- "$1"
  elif command -v wget >/dev/null 2>&1; then status_limit wget -q -T 2 -O - -- "$1"
  elif command -v python3 >/dev/null 2>&1; then
    status_limit python3 -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=2).read().decode())' \
      "$1"
  else echo "no curl, wget or python3 on the host" >&2; return 2; fi
}
status_limit() { if command -v timeout >/dev/null 2>&1; then timeout 2 "$@"; else "$@"; fi; }
