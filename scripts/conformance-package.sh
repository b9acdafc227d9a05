#!/usr/bin/env bash
# Packs the conformance suite (conformance/, its own npm package), installs the tarball into an empty
# folder as an outside implementer would, and runs it with every profile against a live governed
# InterLock (scripts/conformance-package-server.ts: real PostgreSQL at INTERLOCK_TEST_PG_URL or
# 127.0.0.1:5432, the sql-gateway fixture in its source database).
# Prints the tarball's size; exits non-zero when packing, installing or any profile fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '[conformance-package] %s\n' "$*" >&2; }

log "npm pack (conformance/)"
TGZ="$(cd "$ROOT/conformance" && npm pack --silent --pack-destination "$WORK" | tail -n 1)"
SIZE="$(stat -c %s "$WORK/$TGZ")"
log "tarball $TGZ: $SIZE bytes ($(( SIZE / 1024 )) KiB)"
if [ "$SIZE" -ge $((2 * 1024 * 1024)) ]; then log "the tarball is over 2 MiB"; exit 1; fi

log "install into an empty folder"
mkdir -p "$WORK/outside"
( cd "$WORK/outside" && npm init -y >/dev/null && npm install --no-audit --no-fund --prefer-offline "$WORK/$TGZ" >/dev/null )

log "start a live governed InterLock"
node "$ROOT/node_modules/tsx/dist/cli.mjs" "$ROOT/scripts/conformance-package-server.ts" --out "$WORK/server.json" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do [ -s "$WORK/server.json" ] && break; kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
if [ ! -s "$WORK/server.json" ]; then log "the gateway did not start:"; cat "$WORK/server.log" >&2; exit 1; fi
field() { node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]]))' "$WORK/server.json" "$1"; }

log "run every profile from the installed package"
( cd "$WORK/outside" && npx --no-install interlock-conformance --url "$(field url)" --api-key "$(field apiKey)" \
    --profile mcp-stateless,interlock-v1,sql-gateway --pg-url "$(field pgUrl)" --source-id "$(field sourceId)" --restricted-api-key "$(field restrictedApiKey)" \
    --num-runs "${CONFORMANCE_NUM_RUNS:-25}" --junit "$WORK/junit.xml" )
log "every profile passed (JUnit report: $(grep -c '<testcase' "$WORK/junit.xml") test cases)"
