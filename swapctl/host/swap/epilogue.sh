#!/bin/sh
# What follows a successful swap (journal.py): a shell on the host that reads its script from stdin, after
# its input, and runs it only once it has come whole, to its last line, $end: a controller that dies while
# sending (or a link that goes silent until TCP gives up) must not leave the host running part of a line,
# such as an `rm -rf` of a release cut short to its parent directory, at the EOF that comes later.
: "${end?}"
s=$(cat) || exit 3
case $s in
  *"$end") eval "$s" ;;
  *) echo "the epilogue arrived cut short: nothing of it was run" >&2; exit 3 ;;
esac
