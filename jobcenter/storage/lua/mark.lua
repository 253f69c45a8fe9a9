--[[ mark: settle a task by hand (`jobcenter mark`): it ends succeeded (with the result
  given), failed or skipped, and the job goes on as if it had ended so: its children are
  released, or the failure or skip is passed on to them. Allowed from waiting, queued,
  retry_wait (its due retry never runs), awaiting (what it waits for finds it no longer
  awaiting: a later signal is refused, the awaited job's end and its timeout leave it as
  marked), failed and upstream_failed; refused while an attempt runs (running, timed_out)
  and once it ended otherwise (clear it first). A task that had ended is first put back as
  revive does, with the ended tasks below it (the first chunk of them; the caller resets the
  rest with revive.lua), counted with it as not ended; then it ends as marked, in the same
  call. A mapped task once expanded is settled through its instances. The history gets a
  line: who marked it, and why.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] task index  ARGV[FIRST_OWN_ARG+1] succeeded | failed | skipped
  ARGV[FIRST_OWN_ARG+2] its result, msgpack ('' for none: a succeeded task's result is nil)
  ARGV[FIRST_OWN_ARG+3] who  ARGV[FIRST_OWN_ARG+4] why ('' for no reason)
  ARGV[FIRST_OWN_ARG+5..] for a task that had ended, the ended tasks below it to reset
  (parents before children): its index, its number of parents, their indexes
  Returns {0, tasks reset} | {3} a cascade is under way: finish it ('continue') and call
          again | {-3, reason} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)
local i, outcome, result = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1], ARGV[FIRST_OWN_ARG + 2]
local who, why = ARGV[FIRST_OWN_ARG + 3], ARGV[FIRST_OWN_ARG + 4]
-- from a state a task may be marked in: whether it had ended
local MARKABLE = {[T_WAITING] = false, [T_QUEUED] = false, [T_RETRY_WAIT] = false,
  [T_AWAITING] = false, [T_FAILED] = true, [T_UPSTREAM_FAILED] = true}
-- how each outcome reaches the children (parent_ended) and the job counter it counts in
local FRONTIER_KIND = {[T_SUCCEEDED] = 'r', [T_FAILED] = 'f', [T_SKIPPED] = 'k'}

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local refused = RESET.refusal()
if refused then return refused end
if not FRONTIER_KIND[outcome] then
  return {WRONG_STATE, 'a task is marked succeeded, failed or skipped, not ' .. outcome}
end
local state = task_state(i)
if not state then return {WRONG_STATE, 'no task ' .. i} end
if state == T_RUNNING or state == T_TIMED_OUT then
  return {WRONG_STATE, 'task ' .. task_name(i) .. ' is ' .. state .. ': an attempt runs; '
    .. 'wait for it to end, then mark or clear it'}
end
if MARKABLE[state] == nil then
  return {WRONG_STATE, 'task ' .. task_name(i) .. ' ended ' .. state
    .. ' already: clear it to run it again'}
end
if state == outcome then return {WRONG_STATE, 'task ' .. task_name(i) .. ' is ' .. state
  .. ' already'} end
if redis.call('HEXISTS', TASKS, TF_MAP_INSTANCES .. i) == 1 then
  return {WRONG_STATE, 'task ' .. task_name(i) .. ' is a map expanded into instances: '
    .. 'mark its instances'}
end
local had_ended = MARKABLE[state]
if had_ended then
  RESET.revived[i], RESET.ended[i] = true, state
  local refusal = RESET.read(FIRST_OWN_ARG + 5, {})
  if refusal then return refusal end
end

local now = now_ms()
local reset = 0
if had_ended then -- alive again for a moment, as revive would make it, then ended as marked
  RESET.uncount({i})
  RESET.uncount(RESET.list)
  if state == T_FAILED then redis.call('ZREM', DLQ, lease_member(i)) end
  local failed, skipped = RESET.apply(now, EVENT_KIND.REVIVED)
  reset = #RESET.list
  RESET.reopen_job(PACKED, 1 + reset, 1 + failed, skipped, now)
else -- out of wherever it waits: its queue, the retries, a reservation, a full limit (an
  -- awaiting task is in none of them: it stays in the job's `awaits`, read by state)
  local queue = QUEUES[task_queue(i)]
  redis.call('ZREM', queue.ready, queue_member(i))
  redis.call('ZREM', queue.delayed, task_priority(i) .. '|' .. queue_member(i))
  redis.call('ZREM', LEASES, lease_member(i))
  redis.call('HDEL', CLAIMS, lease_member(i))
  SLOT.free_slots(i)
  SLOT.unpark(i)
end
local text = 'marked ' .. outcome .. ' by ' .. who .. (why ~= '' and (': ' .. why) or '')
redis.call('HSET', TASKS, TF_STATE .. i, outcome, TF_FINISHED_AT .. i, now,
  TF_UPDATED_AT .. i, now)
redis.call('HDEL', TASKS, TF_WAITING_FOR .. i, TF_GATE_WAIT .. i, TF_RESULT .. i)
if outcome == T_SUCCEEDED then
  redis.call('HDEL', TASKS, TF_ERROR .. i)
  if result ~= '' then redis.call('HSET', TASKS, TF_RESULT .. i, result) end
else
  redis.call('HSET', TASKS, TF_ERROR .. i, text)
end
if outcome == T_FAILED then
  redis.call('ZADD', DLQ, now, lease_member(i))
  redis.call('HINCRBY', JOB, JOB_FIELD.FAILED, 1)
elseif outcome == T_SKIPPED then
  redis.call('HINCRBY', JOB, JOB_FIELD.SKIPPED, 1)
  if not META.rules then -- a job without rules never skipped: its children count it now
    redis.call('HSET', JOB, JOB_FIELD.TRIGGER_RULES, 1)
    META.rules = true
  end
end
OBS.emit(outcome == T_SUCCEEDED and EVENT_KIND.SUCCEEDED or outcome == T_FAILED
  and EVENT_KIND.FAILED or EVENT_KIND.SKIPPED, i, {EVENT_FIELD.DETAIL, 'marked by ' .. who})
OBS.count_finished(i, outcome)
RESET.record_by_hand(i, outcome, now, who, 'marked ' .. outcome, why)
push_frontier(FRONTIER_KIND[outcome], i, i)
task_finished(now)
drain_frontier(now, nil)
return {OK, reset}
