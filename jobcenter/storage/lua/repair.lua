--[[ repair: recovery's fixes for one job's tasks, each checked again here, in one bounded
  batch. A task no longer in the broken state is left alone, so a repair never duplicates.
  'requeue'  queued or retry_wait, in no queue, delayed set or lease: queued again
             (a lost queue entry, ARCHITECTURE.md, Recovery rule 2)
  'release'  waiting with every parent ended (parents given): decided by its trigger rule,
             counted afresh from its parents' states (queued, skipped or upstream_failed; rule 3);
             a mapped task has its expansion scheduled (again, if its entry was lost)
  'abandon'  queued, retry_wait or timed_out with no live worker for its task name: failed,
             and its descendants upstream_failed (rule 8)
  'node'     queued or retry_wait on a node with no live worker (rule 4): the verdict uses
             one attempt, which never started (no handler, no start); while attempts
             remain the task is queued again on its node, else it fails as in 'abandon'
  'lease'    running or timed_out with no lease: given a lease due now, so the expiry
             rules (rule 1) take it from there
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] action  ARGV[FIRST_OWN_ARG+1] error text (abandon, node)  then per task:
  index, and for
  'release' a count of parents followed by the parents' indexes
  Returns {0, number repaired, of which failed} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local action, err = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local repaired, failed = 0, 0
-- Say so (an event, a count by rule) before the transition the repair makes.
local function repairing(i)
  OBS.emit(EVENT_KIND.REPAIRED, i, {EVENT_FIELD.DETAIL, action})
  OBS.count(METRIC_FIELD.REPAIRS .. '\t' .. action)
  repaired = repaired + 1
end
local k = FIRST_OWN_ARG + 2
while k <= #ARGV do
  local i = ARGV[k]
  k = k + 1
  local state = task_state(i)
  local lease = lease_member(i)
  local queue = QUEUES[task_queue(i)]
  if action == 'requeue' then
    local held = redis.call('ZSCORE', LEASES, lease)
      or redis.call('ZSCORE', queue.ready, queue_member(i))
      or redis.call('ZSCORE', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
      or redis.call('HEXISTS', SLOT.keys.limits,
        LIMIT_FIELD.PARKED_AT .. lease) == 1 -- waiting for a full limit
    if (state == T_QUEUED or state == T_RETRY_WAIT) and not held then
      repairing(i)
      enqueue(i, now)
    end
  elseif action == 'release' then
    local nparents = tonumber(ARGV[k])
    local parents = count_parents(k + 1, k + nparents, {})
    k = k + 1 + nparents
    -- an expanded mapped task is released by its instances (recovery may not see them
    -- all); one whose expansion lost its frontier entry has it scheduled again
    local expanded = redis.call('HEXISTS', TASKS, TF_MAP_INSTANCES .. i) == 1
    if state == T_WAITING and parents.d == 0 and expanded then
      if map_resume(i, now) then repairing(i) end
    elseif state == T_WAITING and parents.u == 0 then
      local verdict, rule = parents_verdict(i, parents)
      store_parent_counts(i, parents)
      repairing(i)
      act_on_verdict(i, rule, verdict, nil, i, now, nil)
    end
  elseif action == 'lease' then
    if (state == T_RUNNING or state == T_TIMED_OUT) and not redis.call('ZSCORE', LEASES, lease) then
      repairing(i)
      redis.call('ZADD', LEASES, now, lease)
    end
  elseif action == 'abandon' then
    if state == T_QUEUED or state == T_RETRY_WAIT or state == T_TIMED_OUT then
      redis.call('ZREM', queue.ready, queue_member(i))
      redis.call('ZREM', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
      redis.call('HDEL', CLAIMS, lease)
      SLOT.unpark(i)
      repairing(i)
      failed = failed + 1
      fail_task(i, now, err)
    end
  elseif action == 'node' then
    if state == T_QUEUED or state == T_RETRY_WAIT then
      redis.call('ZREM', queue.ready, queue_member(i))
      redis.call('ZREM', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
      redis.call('ZREM', LEASES, lease) -- a reservation of the node's dead worker
      redis.call('HDEL', CLAIMS, lease)
      SLOT.free_slots(i)
      SLOT.unpark(i)
      repairing(i)
      local used = tonumber(redis.call('HGET', TASKS, TF_ATTEMPTS .. i) or 0) + 1
      redis.call('HSET', TASKS, TF_ATTEMPTS .. i, used, TF_ERROR .. i, err, TF_UPDATED_AT .. i, now)
      redis.call('HDEL', TASKS, TF_HANDLER .. i, TF_STARTED_AT .. i)
      if used < max_attempts(i) then
        OBS.emit(EVENT_KIND.RETRIED, i, OBS.attempt_of(i, err))
        if OBS.metrics_on then OBS.count(METRIC_FIELD.RETRIES .. '\t' .. OBS.task_labels(i)) end
        record_history(i, T_RETRY_WAIT, now, err)
        enqueue(i, now)
      else
        failed = failed + 1
        fail_task(i, now, err)
      end
    end
  end
end
flush_wakes()
drain_frontier(now, nil)
return {OK, repaired, failed}
