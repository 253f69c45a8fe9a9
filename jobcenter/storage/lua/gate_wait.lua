--[[ gate_wait: a gate the task requires said no before its attempt began: the attempt goes
  back unused (attempt number restored, handler cleared, so no token matches any more;
  its nonce stays, so a late report of it is stale, not unknown), its pool and limit slots are given
  back, and the task waits in its queue's delayed set for the gate's backoff. The task records which
  gate and since when ('gw:' "<since ms>|<gate>", kept while the same gate keeps saying no) for
  status; once that has lasted the gate's give-up time the task fails for good, with an error naming
  the gate (its retries are for its own failures, not the environment's).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  then quintuples: task index, fencing token (_job.lua token_of),
  gate, backoff ms, give-up ms
  Returns {0, {code per quintuple}} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  Codes: 0 waits | 1 failed: the gate said no for too long | -2 stale token | -3 not running
  | -9 an attempt Redis never started: it lost writes (refusal_of) ]]

local handler = ARGV[FIRST_OWN_ARG]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local codes, woken, failed = {}, {}, false
for k = FIRST_OWN_ARG + 1, #ARGV, 5 do
  local i, token, gate = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local backoff, give_up = tonumber(ARGV[k + 3]), tonumber(ARGV[k + 4])
  local state = task_state(i)
  local code = ITEM_OK
  local refusal, fields = token_refusal(i, token, handler)
  local attempt = fields[1]
  if refusal then
    code = refusal
  elseif state ~= T_RUNNING and state ~= T_TIMED_OUT then
    code = ITEM_WRONG_STATE
  else
    local waiting = redis.call('HGET', TASKS, TF_GATE_WAIT .. i)
    local since, last = now, nil
    if waiting then since, last = string.match(waiting, '^(%d+)|(.*)$') end
    if last ~= gate then since = now end
    since = tonumber(since)
    redis.call('HSET', TASKS, TF_ATTEMPTS .. i, tonumber(attempt) - 1)
    if now - since >= give_up then
      redis.call('HDEL', TASKS, TF_GATE_WAIT .. i)
      fail_task(i, now, 'gate ' .. gate .. ' said no for ' .. math.floor((now - since) / 1000)
        .. ' s (its give_up_after): the task did not run')
      code = ITEM_ALREADY -- the attempt ended: the task failed
      failed = true
    else
      OBS.emit(EVENT_KIND.GATE_WAIT, i, {EVENT_FIELD.ATTEMPT, attempt, EVENT_FIELD.HANDLER, handler,
        EVENT_FIELD.DETAIL, gate})
      OBS.count(METRIC_FIELD.GATE_WAITS .. '\t' .. gate)
      redis.call('HSET', TASKS, TF_STATE .. i, T_QUEUED, TF_GATE_WAIT .. i, since .. '|' .. gate,
        TF_UPDATED_AT .. i, now)
      redis.call('HDEL', TASKS, TF_HANDLER .. i, TF_STARTED_AT .. i)
      redis.call('ZREM', LEASES, lease_member(i))
      SLOT.free_slots(i)
      local queue = QUEUES[task_queue(i)]
      redis.call('ZADD', queue.delayed, now + backoff, task_priority(i) .. '|' .. queue_member(i))
      woken[queue.wake] = true
    end
  end
  codes[#codes + 1] = code
end
-- an idle worker re-claims and learns when to wake for these tasks
for key in pairs(woken) do wake(key, 1) end
if next(woken) then redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now) end
if failed then drain_frontier(now, nil) end
OBS.flush_counts() -- the gate waits' counts, a failed task's
return {OK, codes}
