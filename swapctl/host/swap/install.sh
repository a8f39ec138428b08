#!/bin/sh
# Turns a file uploaded by SFTP into a release: checks its sha256, then renames it into place.
# Inputs: tmp (the uploaded file), dir, name, sha (its expected sha256), manifest. Prints as install_release.
: "${tmp?}" "${dir?}" "${name?}" "${sha?}" "${manifest?}"
# shellcheck source=lib.sh
. ./lib.sh
# shellcheck source=release.sh
. ./release.sh
in_release_dir || { echo "BROKEN the state directory is not safe to write to: $unsafe"; exit 0; }
install_release ""
