#!/bin/sh
# The KiB free on the file system that holds $path.
: "${path?}"
df -P -k -- "$(dirname -- "$path")" | awk 'END {print $4}'
