--[[ pause_job: nothing more of the job starts until resume_job: claims park its tasks as
  they meet them (claim.lua), completions take none of them; its running attempts finish.
  KEYS: the job context (_job.lua)
  Returns {0} paused | {1} paused already | {-3} the job has finished | {-4} job gone
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

if not load_job() then return {META.refusal} end
if META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED then
  return {WRONG_STATE}
end
local limits = SLOT.keys.limits
if redis.call('HEXISTS', limits, LIMIT_FIELD.PAUSED_JOB .. JOB_ID) == 1 then return {ALREADY} end
local now = now_ms()
redis.call('HSET', limits, LIMIT_FIELD.PAUSED_JOB .. JOB_ID, now)
redis.call('HINCRBY', limits, LIMIT_FIELD.PAUSED_JOBS, 1)
redis.call('HSET', JOB, JOB_FIELD.PAUSED, now, JOB_FIELD.UPDATED_AT, now)
OBS.emit(EVENT_KIND.PAUSED, false)
return {OK}
