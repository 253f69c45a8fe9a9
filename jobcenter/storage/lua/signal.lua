--[[ signal: a signal reaches a job. Each of its tasks with `wait_for: {signal: <name>}` that
  awaits it succeeds with the payload as its result, and its children are released as a
  completion releases them (_await.lua); one that has not reached its wait yet keeps the
  payload (`sg:`) and takes it when it gets there. Sent again with the same payload it
  changes nothing (also once the job ended, until its compaction); with another payload,
  to a task that no longer waits, or to a finished job, it is refused.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] signal name  ARGV[FIRST_OWN_ARG+1] payload (msgpack)
  Returns {0, tasks released, tasks that keep it for later} | {1} sent already, same payload
          | {-3, why} refused: nothing waits for it (or another payload was sent) | {-4} job gone
          | {-5} queues not passed | {-10} a newer release wrote the job (NEWER_PROTOCOL) ]]

local name, payload = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local job_text = 'job ' .. JOB_ID
local finished = job_text .. ' has finished (' .. META.state .. '): nothing waits for signal '
  .. name
if META.packed then return {WRONG_STATE, finished} end
local ended = META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED

-- checks first: every task waiting for it, and whether one refuses it
local to_release, keep, same, why = {}, {}, 0, nil
for i in string.gmatch(redis.call('HGET', JOB, JOB_FIELD.AWAITS) or '', '%d+') do
  local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_AWAIT .. i, TF_SIGNAL .. i,
    TF_RESULT .. i, TF_ID .. i)
  local kind, _, waited = await_of(f[2] or '')
  local task = 'task ' .. (f[5] or i)
  if kind == 's' and waited == name then
    local got = f[3] or (f[1] == T_SUCCEEDED and (f[4] or ''))
    if got == payload then
      same = same + 1
    elseif got then -- kept, or it succeeded: released by the signal, or marked (mark.lua)
      why = task .. ' of ' .. job_text .. ' already got signal ' .. name
        .. ' with another payload' .. (f[3] and '' or ' (or was marked succeeded by hand)')
        .. ': a signal is sent once'
    elseif f[1] == T_AWAITING then
      to_release[#to_release + 1] = i
    elseif f[1] == T_WAITING then
      keep[#keep + 1] = i
    else
      why = task .. ' of ' .. job_text .. ' is ' .. f[1] .. ': it no longer waits for signal '
        .. name
    end
  end
end
-- the same signal again is a no-op, even once the job ended (until it is compacted)
if same > 0 and not why and #to_release + #keep == 0 then return {ALREADY} end
if ended then return {WRONG_STATE, finished} end
if redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 then
  return {WRONG_STATE, job_text .. ' is being cancelled: nothing waits for signal ' .. name}
end
if why then return {WRONG_STATE, why} end
if #to_release + #keep == 0 then
  return {WRONG_STATE, job_text .. ' has no task waiting for signal ' .. name}
end

local now = now_ms()
OBS.emit(EVENT_KIND.SIGNALLED, false, {EVENT_FIELD.DETAIL, name})
for _, i in ipairs(keep) do
  redis.call('HSET', TASKS, TF_SIGNAL .. i, payload, TF_UPDATED_AT .. i, now)
end
for _, i in ipairs(to_release) do await_release(i, now, payload) end
redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
drain_frontier(now, nil)
return {OK, #to_release, #keep}
