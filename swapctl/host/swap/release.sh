# shellcheck shell=sh
# Turning a verified upload into a release: the install script and the receive script include this file.
# Needs lib.sh (sha256).

# in_release_dir: the state tree that holds $dir entered once (lib.sh's enter_state), and $tmp, $dir (and
# $base, a patch's) made relative to it: a rename of .swapctl meanwhile redirects no write
in_release_dir() {
  state=${dir%/releases/*}
  enter_state "$state" || return 1
  # shellcheck disable=SC2034 # unsafe: the caller says it
  unsafe="$dir: outside the state directory"
  tmp=$(here "$state" "$tmp") && dir=$(here "$state" "$dir") || return 1
  [ -z "${base:-}" ] || base=$(here "$state" "$base")
}

# install_release GOT: checks that $tmp has sha256 $sha (GOT when taken on the way in), then renames it to
# $dir/$name with $manifest beside it. Prints MISMATCH sha256 or INSTALLED, then MISSING for each shared
# library the release needs and the host lacks: they must resolve here, before anything stops.
install_release() {
  got=$1; : "${tmp?}" "${dir?}" "${name?}" "${sha?}" "${manifest?}"
  umask 077
  [ -n "$got" ] || got=$(sha256 < "$tmp")
  if [ "$got" != "$sha" ]; then rm -f -- "$tmp"; echo "MISMATCH $got"; return 0; fi
  # shellcheck disable=SC2174 # 700 for the release directory itself; its parents exist already
  chmod 755 "$tmp" && mkdir -p -m 700 -- "$dir" && mv -f -- "$tmp" "$dir/$name" &&
    printf '%s\n' "$manifest" > "$dir/.manifest.tmp" && mv -f -- "$dir/.manifest.tmp" "$dir/manifest.json" &&
    echo INSTALLED
  ldd -- "$dir/$name" 2>&1 | grep 'not found' | sed 's/^[[:space:]]*/MISSING /'
  return 0
}
