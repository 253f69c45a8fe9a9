--[[ expire: act on leases found expired (seed 004). Each lease is checked again here, so
  any number of workers may report the same one.
  reserved, never started -> back in its queue (no attempt was used)
  running   -> timed_out, with a second deadline of grace ms
  timed_out -> past the second deadline: queued as a new attempt, or failed (and cascaded)
               when its attempts are exhausted
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] grace ms  ARGV[FIRST_OWN_ARG+1..] task indexes
  Returns {0, {outcome per index}} | {-4} job gone (its leases are dropped) | {-5}
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  Outcomes: 'live' (not expired) | 'requeued' | 'timed_out' | 'retried' | 'failed' | 'dropped' ]]

local grace_ms = tonumber(ARGV[FIRST_OWN_ARG])
if not load_job() then
  if META.refusal == JOB_GONE then drop_reservations(FIRST_OWN_ARG + 1) end
  return {META.refusal}
end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local outcomes = {}
local changed = false -- a lease found live is left alone: the report writes nothing
for k = FIRST_OWN_ARG + 1, #ARGV do
  local i = ARGV[k]
  local lease = lease_member(i)
  local deadline = redis.call('ZSCORE', LEASES, lease)
  local state = task_state(i)
  local outcome
  if not deadline or tonumber(deadline) > now then
    outcome = 'live'
  elseif state == T_QUEUED or state == T_RETRY_WAIT then
    redis.call('ZREM', LEASES, lease)
    redis.call('HDEL', CLAIMS, lease)
    SLOT.free_slots(i)
    enqueue(i, now)
    outcome = 'requeued'
  elseif state == T_RUNNING then
    redis.call('HSET', TASKS, TF_STATE .. i, T_TIMED_OUT, TF_UPDATED_AT .. i, now)
    OBS.emit(EVENT_KIND.TIMED_OUT, i, OBS.attempt_of(i))
    redis.call('ZADD', LEASES, now + grace_ms, lease)
    outcome = 'timed_out'
  elseif state == T_TIMED_OUT then
    local msg = 'timed out: no heartbeat from handler ' .. (redis.call('HGET', TASKS,
      TF_HANDLER .. i) or '?')
    local attempt = tonumber(redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or 0)
    if attempt < max_attempts(i) then
      OBS.emit(EVENT_KIND.RETRIED, i, OBS.attempt_of(i, msg))
      if OBS.metrics_on then OBS.count(METRIC_FIELD.RETRIES .. '\t' .. OBS.task_labels(i)) end
      redis.call('HSET', TASKS, TF_ERROR .. i, msg, TF_FINISHED_AT .. i, now)
      record_history(i, T_TIMED_OUT, now, msg)
      redis.call('ZREM', LEASES, lease)
      SLOT.free_slots(i)
      enqueue(i, now)
      outcome = 'retried'
    else
      fail_task(i, now, msg)
      outcome = 'failed'
    end
  else
    redis.call('ZREM', LEASES, lease)
    redis.call('HDEL', CLAIMS, lease)
    SLOT.free_slots(i)
    outcome = 'dropped'
  end
  outcomes[#outcomes + 1] = outcome
  if outcome ~= 'live' then
    changed = true
    OBS.count(METRIC_FIELD.EXPIRED .. '\t' .. outcome)
  end
end
if changed then
  redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
  drain_frontier(now, nil)
end
return {OK, outcomes}
