--[[ finalize: close a job whose tasks are all terminal. The transition that ends the last
  task does this itself; this script serves leader messages (a job cancelled before its
  split) and recovery (a job whose tasks all ended but that was never closed).
  KEYS: the job context (_job.lua)
  Returns {0, state} | {1, state} finalized already | {2} tasks still unfinished | {-4}
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
          | {-5} idempotency key not passed ]]

local message = 'finalize|' .. JOB_ID
if not load_job() then
  if META.refusal == JOB_GONE then redis.call('ZREM', LEADER, message) end
  return {META.refusal}
end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  redis.call('ZREM', LEADER, message)
  return {ALREADY, META.state}
end
if not queues_passed() then return {KEYS_MISSING} end
if tonumber(redis.call('HGET', JOB, JOB_FIELD.LEFT) or 1) > 0 then
  redis.call('ZREM', LEADER, message)
  return {UNFINISHED}
end
local now = now_ms()
local state = finalize_job(now)
compact_when_settled(now)
OBS.flush_counts()
return {OK, state}
