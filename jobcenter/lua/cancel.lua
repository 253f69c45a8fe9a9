--[[ cancel: stop a job. A pending job is cancelled at once; a running one has its unfinished
  tasks cancelled in bounded chunks (a 'cancel' leader message carries on), taking queued
  ones out of their queues and revoking running attempts (their results are then rejected).
  KEYS: the job context (_job.lua)
  ARGV[A] 1 for a request from a client, 0 for a leader going on with one
  Returns {0, tasks still to visit} | {1, state} finished already | {-4} job gone | {-5} ]]

local CANCEL_BUDGET = 1000 -- tasks visited per call: keeps every call short

if not load_job() then return {-4} end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  redis.call('ZREM', LEADER, 'cancel|' .. JOB_ID)
  return {1, META.state}
end
if not queues_passed() then return {-5} end

local now = now_ms()
redis.call('HSET', J, 'cancel_requested', 1, 'updated_at', now)
redis.call('ZREM', LEADER, 'cancel|' .. JOB_ID)
if META.state == J_PENDING then
  -- nothing is queued before the split ends: no task can have started
  redis.call('ZREM', LEADER, 'split|' .. JOB_ID)
  redis.call('HSET', J, 'left', 0, 'ncancelled', redis.call('HGET', J, 'n'))
  leader_message('finalize', now)
  return {0, 0}
end

local n = tonumber(redis.call('HGET', J, 'n'))
local cursor = tonumber(redis.call('HGET', J, 'cancel_cursor') or 0)
local stop = math.min(n, cursor + CANCEL_BUDGET)
for i = cursor, stop - 1 do
  local state = task_state(i)
  if state == T_WAITING or state == T_QUEUED or state == T_RETRY_WAIT
      or state == T_RUNNING or state == T_TIMED_OUT then
    local queue = QUEUES[task_queue(i)]
    redis.call('ZREM', queue.ready, queue_member(i))
    redis.call('ZREM', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
    redis.call('ZREM', LEASES, lease_member(i))
    redis.call('HDEL', CLAIMS, lease_member(i))
    if state == T_RUNNING or state == T_TIMED_OUT then
      record_history(i, T_CANCELLED, now, 'cancelled')
    end
    redis.call('HSET', T, 's:' .. i, T_CANCELLED, 'tf:' .. i, now)
    redis.call('HINCRBY', J, 'ncancelled', 1)
    task_finished(now)
  end
end
redis.call('HSET', J, 'cancel_cursor', stop)
if stop < n then leader_message('cancel', now) end
return {0, n - stop}
