# expect NAME WANT_RC WANT_TEXT... -- command...: runs the command once and counts it as passed
# when it exits with WANT_RC and its output holds every WANT_TEXT (an empty one asks nothing).
# Sourced by the shell test suites with their arguments (the loom binary, the source tree):
# sets $loom, $src (and changes into it) and $tmp (removed on exit); the suites report
# $passed and $failed.
loom="$1"
src=$(cd "$2" && pwd)
cd "$src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
expect() {
  local name="$1" want_rc="$2"
  shift 2
  local wants=()
  while [ "$1" != "--" ]; do wants+=("$1"); shift; done
  shift
  "$@" >"$tmp/out" 2>&1
  local rc=$? missing=""
  for want in "${wants[@]}"; do
    if [ -n "$want" ] && ! grep -qF -- "$want" "$tmp/out"; then missing="$want"; fi
  done
  if [ "$rc" -ne "$want_rc" ] || [ -n "$missing" ]; then
    echo "FAIL $name: rc=$rc (want $want_rc), output:"
    sed 's/^/    /' "$tmp/out"
    echo "    (wanted: $missing)"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}
