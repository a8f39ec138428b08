#!/bin/sh
# Prints each argument that names no file: the config files a daemon's command line names.
# shellcheck source=lib.sh
. ./lib.sh
missing "$@"
