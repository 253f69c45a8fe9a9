--[[ fail: a running attempt failed: retry_wait (backoff) while attempts remain and the
  caller asks for a retry, else failed, with every descendant marked upstream_failed.
  KEYS: the job context (_job.lua)
  ARGV[A] handler id  ARGV[A+1] task index  ARGV[A+2] attempt  ARGV[A+3] error text
  ARGV[A+4] retry delay ms, or -1 for no retry (Fatal, or a non-retryable error)
  Returns {0, new state} | {1, state} this attempt ended already | {-2} stale token
          | {-3} not running | {-4} job gone | {-5} queues not passed ]]

local handler, i, attempt = ARGV[A], ARGV[A + 1], ARGV[A + 2]
local err, delay = ARGV[A + 3], tonumber(ARGV[A + 4])

if not load_job() then return {-4} end
if not queues_passed() then return {-5} end
local state = task_state(i)
if token_of(i) ~= attempt .. ':' .. handler then return {-2} end
if state ~= T_RUNNING and state ~= T_TIMED_OUT then
  if state == T_FAILED or state == T_RETRY_WAIT or state == T_QUEUED or state == T_SUCCEEDED then

    return {1, state}
  end
  return {-3}
end

local now = now_ms()
if delay >= 0 and tonumber(attempt) < max_attempts(i) then
  redis.call('HSET', T, 'e:' .. i, err, 'tf:' .. i, now, 'tu:' .. i, now)
  redis.call('HDEL', T, 'wf:' .. i) -- it ran: no longer waiting for a worker with its code
  record_history(i, T_RETRY_WAIT, now, err)
  redis.call('ZREM', LEASES, lease_member(i))
  if delay == 0 then
    enqueue(i, now)
    flush_wakes()
    return {0, T_QUEUED}
  end
  redis.call('HSET', T, 's:' .. i, T_RETRY_WAIT)
  local queue = QUEUES[task_queue(i)]
  redis.call('ZADD', queue.delayed, now + delay, task_priority(i) .. '|' .. queue_member(i))
  wake(queue.wake, 1) -- an idle worker re-claims and learns when to wake for this retry

  return {0, T_RETRY_WAIT}
end
fail_task(i, now, err)
drain_frontier(now, nil)
return {0, T_FAILED}
