--[[ continue: go on with a job's unfinished releases and failure cascades (the frontier),
  one bounded chunk per call; asks for another call while any remain.
  KEYS: the job context (_job.lua)
  Returns {0, entries left in the frontier} | {-4} job gone | {-5} queues not passed 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

if not load_job() then
  if META.refusal == JOB_GONE then
    redis.call('ZREM', LEADER, 'continue|' .. JOB_ID)
    redis.call('DEL', FRONTIER)
  end
  return {META.refusal}
end
if not queues_passed() then return {KEYS_MISSING} end
redis.call('ZREM', LEADER, 'continue|' .. JOB_ID)
drain_frontier(now_ms(), nil)
return {OK, redis.call('LLEN', FRONTIER)}
