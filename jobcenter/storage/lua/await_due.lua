--[[ await_due: a job's 'await' leader message, due at the earliest timeout of its waits
  (_await.lua): the awaiting tasks whose `wait_for` timeout passed fail (with the cascade), and
  the message is posted again for the next timeout, or the recheck the leader asks for (a
  schedule's run that is not there yet). The leader registers the job waits first
  (runtime/waits.py); this ends its step.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] when to look again (ms), or ''.
  Returns {0} | {1} the job finished already | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

local message = 'await|' .. JOB_ID
if not load_job() then
  if META.refusal == JOB_GONE then redis.call('ZREM', LEADER, message) end
  return {META.refusal}
end
if META.packed or META.state == J_SUCCEEDED or META.state == J_FAILED
    or META.state == J_CANCELLED then
  redis.call('ZREM', LEADER, message)
  return {ALREADY}
end
if not queues_passed() then return {KEYS_MISSING} end
redis.call('ZREM', LEADER, message)
local now = now_ms()
local next_due = await_expire(redis.call('HGET', JOB, JOB_FIELD.AWAITS) or '', now)
if next_due then await_due_by(next_due) end
if ARGV[FIRST_OWN_ARG] ~= '' then await_due_by(tonumber(ARGV[FIRST_OWN_ARG])) end
drain_frontier(now, nil)
return {OK}
