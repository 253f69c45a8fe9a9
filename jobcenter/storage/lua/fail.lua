--[[ fail: a running attempt failed: retry_wait (backoff) while attempts remain and the
  caller asks for a retry, else failed, with every descendant marked upstream_failed.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] task index  ARGV[FIRST_OWN_ARG+2] fencing
  token (_job.lua token_of)
  ARGV[FIRST_OWN_ARG+3] error text  ARGV[FIRST_OWN_ARG+4] retry delay ms, or -1 for no retry (Fatal,
  or a non-retryable error)
  Returns {0, new state} | {1, state} this attempt ended already | {-2} stale token (or
          the job finished and was compacted) | {-3} not running | {-4} job gone
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
          | {-5} queues not passed | {-7} its job was cancelled (or abandoned)
          | {-9} an attempt Redis never started: it lost writes (refusal_of) ]]

local handler, i, token = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1], ARGV[FIRST_OWN_ARG + 2]
local err, delay = ARGV[FIRST_OWN_ARG + 3], tonumber(ARGV[FIRST_OWN_ARG + 4])

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
-- a refusal says when the job was cancelled: the worker logs the real cause
local function refused(otherwise)
  return {redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 and JOB_STOPPED or otherwise}
end
-- finished and compacted: no attempt of the job is current any more
if META.packed then return refused(STALE_TOKEN) end
local state = task_state(i)
local refusal, fields = token_refusal(i, token, handler)
if refusal then return {refusal} end
local attempt = fields[1]
if state ~= T_RUNNING and state ~= T_TIMED_OUT then
  if state == T_FAILED or state == T_RETRY_WAIT or state == T_QUEUED or state == T_SUCCEEDED then

    return {ALREADY, state}
  end
  return refused(WRONG_STATE)
end

local now = now_ms()
OBS.observe_run(i, redis.call('HGET', TASKS, TF_STARTED_AT .. i), now)
if delay >= 0 and tonumber(attempt) < max_attempts(i) then
  OBS.emit(EVENT_KIND.RETRIED, i, {EVENT_FIELD.ATTEMPT, attempt, EVENT_FIELD.HANDLER, handler,
    EVENT_FIELD.ERROR, string.sub(err, 1, OBS.error_max), EVENT_FIELD.DETAIL, delay})
  if OBS.metrics_on then OBS.count(METRIC_FIELD.RETRIES .. '\t' .. OBS.task_labels(i)) end
  redis.call('HSET', TASKS, TF_ERROR .. i, err, TF_FINISHED_AT .. i, now, TF_UPDATED_AT .. i, now)
  redis.call('HDEL', TASKS, TF_WAITING_FOR .. i,
    TF_GATE_WAIT .. i) -- it ran: waits for no worker, no gate
  record_history(i, T_RETRY_WAIT, now, err)
  redis.call('ZREM', LEASES, lease_member(i))
  SLOT.free_slots(i)
  if delay == 0 then
    enqueue(i, now)
    flush_wakes()
    return {OK, T_QUEUED}
  end
  redis.call('HSET', TASKS, TF_STATE .. i, T_RETRY_WAIT)
  local queue = QUEUES[task_queue(i)]
  redis.call('ZADD', queue.delayed, now + delay, task_priority(i) .. '|' .. queue_member(i))
  wake(queue.wake, 1) -- an idle worker re-claims and learns when to wake for this retry
  OBS.flush_counts()

  return {OK, T_RETRY_WAIT}
end
fail_task(i, now, err)
drain_frontier(now, nil)
return {OK, T_FAILED}
