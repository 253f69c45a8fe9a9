--[[ cancel: stop a job. A pending job stops at once; a running one has its unfinished tasks
  stopped in bounded chunks (a 'cancel' leader message carries on), taking queued ones out
  of their queues and revoking running attempts (their results are then rejected).
  Two modes: 'cancel' (a user's request: tasks and job end cancelled) and 'abandon'
  (recovery giving up on a stalled scheduled job: unfinished tasks and the job end failed).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] mode for a new request, or '' to go on with the one under way
  ARGV[FIRST_OWN_ARG+1] error text recorded on abandoned tasks
  A job whose tasks Redis lost (tasks_lost, _job.lua) ends at once (settle_lost).
  Returns {0, tasks still to visit} | {1, state} finished already | {-4} job gone | {-5}
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local CANCEL_BUDGET = 1000 -- tasks visited per call: keeps every call short

if not load_job() then return {META.refusal} end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  redis.call('ZREM', LEADER, 'cancel|' .. JOB_ID)
  return {ALREADY, META.state}
end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local mode = redis.call('HGET', JOB, JOB_FIELD.STOP)
if not mode then
  mode = ARGV[FIRST_OWN_ARG] ~= '' and ARGV[FIRST_OWN_ARG] or 'cancel'
  redis.call('HSET', JOB, JOB_FIELD.STOP, mode)
  -- why an abandon (a stalled schedule, a timeout) stopped the job: its own error too
  if mode == 'abandon' and ARGV[FIRST_OWN_ARG + 1] ~= '' then
    redis.call('HSET', JOB, JOB_FIELD.ERROR, ARGV[FIRST_OWN_ARG + 1])
  end
  OBS.emit(EVENT_KIND.CANCEL, false, {EVENT_FIELD.DETAIL, mode})
end
if tasks_lost() then -- Redis lost its tasks: nothing to visit, the job ends now
  local state = settle_lost(now)
  return {OK, 0, state}
end
local final, counter, err = T_CANCELLED, JOB_FIELD.CANCELLED, 'cancelled'
if mode == 'abandon' then final, counter, err = T_FAILED, JOB_FIELD.FAILED,
  ARGV[FIRST_OWN_ARG + 1] end
redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
redis.call('ZREM', LEADER, 'cancel|' .. JOB_ID)
local n = tonumber(redis.call('HGET', JOB, JOB_FIELD.TASKS))
local limit = n
if META.state == J_PENDING then
  -- Nothing is queued before the split ends, so no task has started. The tasks a leader
  -- wrote so far are stopped one by one below; those never written end here, at once.
  redis.call('ZREM', LEADER, 'split|' .. JOB_ID)
  limit = tonumber(redis.call('HGET', JOB, JOB_FIELD.WRITTEN) or 0)
  if redis.call('HSETNX', JOB, JOB_FIELD.UNWRITTEN_STOPPED, 1) == 1 then
    redis.call('HSET', JOB, JOB_FIELD.ERROR, err)
    if n > limit then
      redis.call('HINCRBY', JOB, counter, n - limit)
      task_finished(now, n - limit)
    end
  end
end

local cursor = tonumber(redis.call('HGET', JOB, JOB_FIELD.CANCEL_CURSOR) or 0)
local upto = math.min(limit, cursor + CANCEL_BUDGET)
for i = cursor, upto - 1 do
  local state = task_state(i)
  if state == T_WAITING or state == T_QUEUED or state == T_RETRY_WAIT
      or state == T_RUNNING or state == T_TIMED_OUT or state == T_AWAITING then
    local queue = QUEUES[task_queue(i)]
    redis.call('ZREM', queue.ready, queue_member(i))
    redis.call('ZREM', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
    redis.call('ZREM', LEASES, lease_member(i))
    redis.call('HDEL', CLAIMS, lease_member(i))
    SLOT.free_slots(i)
    SLOT.unpark(i)
    if state == T_RUNNING or state == T_TIMED_OUT then record_history(i, final, now, err) end
    OBS.emit(final == T_CANCELLED and EVENT_KIND.CANCELLED or EVENT_KIND.FAILED, i,
      OBS.attempt_of(i, err))
    OBS.count_finished(i, final)
    redis.call('HSET', TASKS, TF_STATE .. i, final, TF_FINISHED_AT .. i, now, TF_UPDATED_AT .. i,
      now, TF_ERROR .. i, err)
    redis.call('HINCRBY', JOB, counter, 1)
    task_finished(now)
  end
end
redis.call('HSET', JOB, JOB_FIELD.CANCEL_CURSOR, upto)
if upto < limit then leader_message('cancel', now) end
compact_when_settled(now)
OBS.flush_counts()
return {OK, limit - upto}
