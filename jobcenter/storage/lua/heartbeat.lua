--[[ heartbeat: renew the leases of a handler's running attempts in one job; an attempt that
  was timed_out (lease expired, not yet taken over) resumes running (seed 004).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] lease ms  then triples: task index, fencing
  token (_job.lua token_of), progress ('' for no news; else stored and shown by status)
  Returns {0, {code per triple}} | {-4} job gone
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  Codes: 0 renewed | -2 stale token (another attempt owns the task) | -3 not running |
  -7 not running: its job was cancelled (or abandoned), so the attempt should stop |
  -9 an attempt Redis never started: it lost writes (refusal_of) ]]

local handler, lease_ms = ARGV[FIRST_OWN_ARG], tonumber(ARGV[FIRST_OWN_ARG + 1])
if not load_job() then return {META.refusal} end

local now = now_ms()
local codes = {}
for k = FIRST_OWN_ARG + 2, #ARGV, 3 do
  local i, token, progress = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local state = task_state(i)
  local code = ITEM_OK
  local refusal, attempt = token_refusal(i, token, handler)
  if META.packed then -- its job finished and was compacted: no task of it runs
    code = redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 and ITEM_JOB_STOPPED or ITEM_WRONG_STATE
  elseif refusal then
    code = refusal
  elseif state ~= T_RUNNING and state ~= T_TIMED_OUT then
    code = redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 and ITEM_JOB_STOPPED or ITEM_WRONG_STATE
  else
    redis.call('ZADD', LEASES, now + lease_ms, lease_member(i))
    if state == T_TIMED_OUT then
      redis.call('HSET', TASKS, TF_STATE .. i, T_RUNNING, TF_UPDATED_AT .. i, now)
      OBS.emit(EVENT_KIND.RESUMED, i,
        {EVENT_FIELD.ATTEMPT, attempt[1], EVENT_FIELD.HANDLER, handler})
    end
    if progress ~= '' and progress ~= redis.call('HGET', TASKS, TF_PROGRESS .. i) then
      redis.call('HSET', TASKS, TF_PROGRESS .. i, progress, TF_UPDATED_AT .. i,
        now) -- news: a change of the task
    end
  end
  codes[#codes + 1] = code
end
return {OK, codes}
