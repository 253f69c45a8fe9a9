--[[ release: a worker shutting down gives its running attempts back: each goes back to its
  queue at once, and gets one more attempt so the interrupted one does not use up a retry.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  then pairs: task index, fencing token (_job.lua token_of)
  Returns {0, number released} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  An attempt whose token is not the task's current one, or that is no longer running, is left
  alone. ]]

local handler = ARGV[FIRST_OWN_ARG]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local released = 0
for k = FIRST_OWN_ARG + 1, #ARGV, 2 do
  local i = ARGV[k]
  local state = task_state(i)
  local refusal, attempt = token_refusal(i, ARGV[k + 1], handler)
  if not refusal and (state == T_RUNNING or state == T_TIMED_OUT) then
    record_history(i, T_QUEUED, now, 'given back by a stopping worker')
    OBS.emit(EVENT_KIND.RELEASED, i,
      {EVENT_FIELD.ATTEMPT, attempt[1], EVENT_FIELD.HANDLER, handler})
    redis.call('HSET', TASKS, TF_MAX_ATTEMPTS .. i, max_attempts(i) + 1)
    redis.call('ZREM', LEASES, lease_member(i))
    SLOT.free_slots(i)
    enqueue(i, now)
    released = released + 1
  end
end
flush_wakes()
return {OK, released}
