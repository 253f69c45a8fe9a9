#!/bin/sh
# A jobcenter executor in POSIX sh over curl: it takes tasks from the HTTP API's worker
# protocol and runs each as a command. Copy it, or write the same loop in any language.
#
#   JOBCENTER_API=http://127.0.0.1:8080/api/v1 JOBCENTER_TOKEN=<a work token> \
#     examples/executor/executor.sh examples/executor/tasks
#
# Each executable file in the tasks folder is a task, named as the file. It runs with its
# attempt (JSON: args, kwargs, inputs, ids) on stdin and JOBCENTER_JOB_ID, JOBCENTER_TASK_ID,
# JOBCENTER_ATTEMPT set; what it prints on stdout (JSON, or nothing for null) is its result.
# A non-zero exit fails the attempt (retried while the task has retries left; exit 100 fails
# it for good), with the end of its stderr as the error. While it runs, the lease is renewed;
# once the server answers that the attempt was taken over or cancelled, the command is killed.
# Optional: JOBCENTER_QUEUES (comma-separated, default "default"), JOBCENTER_WAIT (seconds a
# claim waits for work, default 20). SIGTERM or SIGINT: finish the running task, then exit.
set -u

api=${JOBCENTER_API:?set JOBCENTER_API, e.g. http://127.0.0.1:8080/api/v1}
token=${JOBCENTER_TOKEN:?set JOBCENTER_TOKEN to a token of the work scope}
dir=${1:?usage: executor.sh TASKS_DIR}
wait_s=${JOBCENTER_WAIT:-20}
me=$$
worker="sh.$(hostname | tr -c 'A-Za-z0-9_.\n-' '-' | cut -c1-60).$me"
work=$(mktemp -d) || exit 1
stopping=
trap 'stopping=1' TERM INT
trap 'rm -rf "$work"' EXIT

say() { echo "executor $worker: $*" >&2; }

# POST a JSON body ($2) to $api$1; the answer's body goes to $work/reply, its status out.
post() {
  curl -sS -o "$work/reply" -w '%{http_code}' -X POST -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' --data-binary "$2" "$api$1" 2>"$work/curl.err" \
    || echo 000
}

# stdin as one JSON string (control characters dropped).
json_string() {
  tr -d '\000-\010\013\014\016-\037' | awk 'BEGIN { ORS = ""; print "\"" }
    { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "");
      if (NR > 1) print "\\n"; print }
    END { print "\"" }'
}

queues=$(echo "${JOBCENTER_QUEUES:-default}" | sed 's/[^,][^,]*/"&"/g')
names=$(for f in "$dir"/*; do [ -f "$f" ] && [ -x "$f" ] && printf '"%s",' "${f##*/}"; done)
[ -n "$names" ] || { say "no executable task files in $dir"; exit 2; }
claim="{\"queues\":[$queues],\"tasks\":[${names%,}],\"max\":1,\"wait\":$wait_s,\"worker\":\"$worker\"}"
say "serving ${names%,} on $api"

while [ -z "$stopping" ]; do
  status=$(post /worker/claim "$claim")
  case $status in
    200) ;;
    401|403) say "the token is refused: $(cat "$work/reply")"; exit 1 ;;
    *) say "claim answered $status $(cat "$work/reply" "$work/curl.err" 2>/dev/null)"; sleep 1; continue ;;
  esac
  # the reply's fields come in the order of the OpenAPI document's AttemptModel
  fields=$(sed -n 's/^{"worker":"[^"]*","attempts":\[{"token":"\([^"]*\)","job_id":"\([^"]*\)","task_id":"\([^"]*\)","index":[0-9]*,"attempt":\([0-9]*\),"task":"\([^"]*\)".*"lease_seconds":\([0-9]*\).*/\1 \2 \3 \4 \5 \6/p' "$work/reply")
  [ -n "$fields" ] || continue  # the wait ended without work
  set -- $fields
  attempt_token=$1 job=$2 task_id=$3 attempt=$4 name=$5 lease=$6
  at="/worker/attempts/$attempt_token"
  sed 's/^{"worker":"[^"]*","attempts":\[//; s/\]}$//' "$work/reply" > "$work/attempt.json"
  rm -f "$work/stopped"
  JOBCENTER_JOB_ID=$job JOBCENTER_TASK_ID=$task_id JOBCENTER_ATTEMPT=$attempt \
    "$dir/$name" < "$work/attempt.json" > "$work/out" 2> "$work/err" &
  task_pid=$!
  # renew the lease every third of it while the command runs (and this executor lives)
  (
    beat=$(( lease / 3 )); [ "$beat" -ge 1 ] || beat=1
    while sleep "$beat" && kill -0 "$task_pid" 2>/dev/null && kill -0 "$me" 2>/dev/null; do
      code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $token" \
        "$api$at/heartbeat" 2>/dev/null)
      if [ "$code" = 409 ] || [ "$code" = 404 ]; then
        touch "$work/stopped"; kill "$task_pid" 2>/dev/null; break
      fi
    done
  ) &
  beat_pid=$!
  while :; do wait "$task_pid"; rc=$?; kill -0 "$task_pid" 2>/dev/null || break; done
  # KILL, not TERM: a TERM that lands before the fresh subshell drops the trap it inherited
  # only sets its `stopping`, and the wait below would then last a whole heartbeat interval
  kill -KILL "$beat_pid" 2>/dev/null; wait "$beat_pid" 2>/dev/null
  if [ -e "$work/stopped" ]; then
    say "job $job task $task_id: the attempt was taken over or cancelled; stopped it"
    continue
  fi
  if [ "$rc" -eq 0 ]; then
    result=$(cat "$work/out"); [ -n "$result" ] || result=null
    status=$(post "$at/complete" "{\"result\":$result}")
    case $status in
      200|409) continue ;;  # 409: taken over meanwhile, the result is discarded
      400|422) echo "the task printed no JSON result: $(head -c 500 "$work/out")" > "$work/err"; rc=1 ;;
      *) say "complete answered $status $(cat "$work/reply")"; continue ;;  # its lease runs out
    esac
  fi
  retryable=true; [ "$rc" -eq 100 ] && retryable=false
  error=$( { echo "$name exited $rc"; tail -c 3000 "$work/err"; } | json_string)
  status=$(post "$at/fail" "{\"error\":$error,\"retryable\":$retryable}")
  [ "$status" = 200 ] || [ "$status" = 409 ] || say "fail answered $status $(cat "$work/reply")"
done
say "stopped"
