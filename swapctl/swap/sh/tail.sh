#!/bin/sh
# The last $lines lines of the file at $path after byte $offset (a failed daemon's log).
: "${path?}" "${offset?}" "${lines?}"
tail -c "+$(( offset + 1 ))" -- "$path" 2>/dev/null | tail -n "$lines"
