#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what is missing (Debian packages, ONNX
# Runtime 1.29 from the pinned npm packs), builds the normal and the ASan+UBSan trees, and
# runs the unit and end-to-end suites in both (the ONNX conformance suite runs only in the
# normal build: it loads ~1000 models and is not a memory-safety test).
#
#   scripts/test.sh              everything
#   scripts/test.sh -R tiers     only tests whose ctest name matches (both builds)
#
# Every suite runs even when an earlier one fails (a red normal build must not hide the
# sanitizer build or the images); the script then ends with one line per suite, e.g.
#   normal: PASS (90 tests)
#   asan: FAIL (2 of 84 failed)
#   images: PASS
# and exits non-zero if any suite failed. Each ctest's own closing lines stay in the output.
set -uo pipefail
cd "$(dirname "$0")/.."

summary=()
failed=0
pass() { summary+=("$1: PASS${2:+ ($2)}"); }
fail() { summary+=("$1: FAIL${2:+ ($2)}"); failed=1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# ctest in build dir $2, as suite $1; the rest are ctest's arguments. The verdict comes from
# ctest's exit code and its closing "N% tests passed, F tests failed out of T" line. Both suites
# run with -j2 for the few tests whose verdict does not depend on time (the libFuzzer runs,
# the npm golden comparisons, the layout check): tests/CMakeLists.txt
# marks every other test RUN_SERIAL, so no timed e2e test ever shares the cores with another.
run_ctest() {
  local name=$1 dir=$2
  shift 2
  local log=$logs/$name.log
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  local nfail total
  nfail=$(sed -E 's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  if [ -n "$line" ] && [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ]; then
    pass "$name" "$total tests"
  elif [ -n "$line" ] && [ "$nfail" -gt 0 ]; then
    fail "$name" "$nfail of $total failed"
  elif [ "$rc" -eq 0 ] && grep -q 'No tests were found' "$log"; then
    pass "$name" "no test matched"
  else
    fail "$name" "ctest exited $rc without a result line"
  fi
}

# Set-up and the normal build; a failure here still lets the other suites try.
normal_built=1
scripts/setup.sh || normal_built=0

asan_built=1
if [ -f .ort_root ]; then
  ORT=$(cat .ort_root)
  cmake -S . -B build-asan -DTIERSERVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DORT_ROOT="$ORT" \
    -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null && cmake --build build-asan -j"$(nproc)" || asan_built=0
else
  echo "scripts/test.sh: no .ort_root (scripts/setup.sh did not get ONNX Runtime)" >&2
  asan_built=0
fi

echo "== normal build =="
if [ "$normal_built" -eq 1 ]; then
  run_ctest normal build -j2 "$@"
else
  fail normal "set-up or build failed"
fi
echo "== ASan+UBSan build =="
if [ "$asan_built" -eq 1 ]; then
  run_ctest asan build-asan -j2 -E '^e2e_conformance$' "$@"
else
  fail asan "build failed"
fi

# The container images and the compose stack under podman (tests/images/run.sh), on full runs
# only. Without podman it prints "SKIPPED: podman not available" (exit 77) and counts as a
# failure: a skipped image test is not a pass (setup.sh installs podman, so CI always runs it).
if [ $# -eq 0 ]; then
  echo "== images and compose stack (podman) =="
  rc=0
  tests/images/run.sh || rc=$?
  if [ "$rc" -eq 0 ]; then
    pass images
  elif [ "$rc" -eq 77 ]; then
    echo "scripts/test.sh: the image test was SKIPPED; not a pass" >&2
    fail images "SKIPPED: not a pass"
  else
    fail images "exit $rc"
  fi
else
  summary+=("images: not run (full runs only)")
fi

echo "== summary =="
printf '%s\n' "${summary[@]}"
exit "$failed"
