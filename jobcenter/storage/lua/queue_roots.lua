--[[ queue_roots: the leader queues one chunk of a job's ready tasks (split step 2), once
  every task is written. The first chunk makes the job running; the last one ends the split.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] leader step timeout ms
  ARGV[FIRST_OWN_ARG+2] roots queued before this chunk  ARGV[FIRST_OWN_ARG+3] roots queued after it
  ARGV[FIRST_OWN_ARG+4] 1 if this is the last chunk
  ARGV[FIRST_OWN_ARG+5..] task indexes
  Returns {0} | {-3} job cancelled, finished, or not fully written | {-4} | {-5} | {-6} 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local j =
  redis.call('HMGET', JOB, JOB_FIELD.WRITTEN, JOB_FIELD.TASKS, JOB_FIELD.QUEUED, JOB_FIELD.STOP)
if (META.state ~= J_PENDING and META.state ~= J_RUNNING) or j[4] or j[1] ~= j[2] then
  return {WRONG_STATE}
end
if tonumber(j[3] or 0) ~= tonumber(ARGV[FIRST_OWN_ARG + 2]) then return {CURSOR_MOVED} end

local now = now_ms()
if META.state == J_PENDING then
  set_job_state(J_RUNNING)
  redis.call('HSET', JOB, JOB_FIELD.STARTED_AT, now)
end
local chunk = {}
for k = FIRST_OWN_ARG + 5, #ARGV do chunk[#chunk + 1] = ARGV[k] end
enqueue_waiting(chunk, now)
flush_wakes()
redis.call('HSET', JOB, JOB_FIELD.QUEUED, ARGV[FIRST_OWN_ARG + 3], JOB_FIELD.LEADER,
  ARGV[FIRST_OWN_ARG], JOB_FIELD.UPDATED_AT, now)
if ARGV[FIRST_OWN_ARG + 4] == '1' then
  redis.call('ZREM', LEADER, 'split|' .. JOB_ID)
  redis.call('HDEL', JOB, JOB_FIELD.SPEC, JOB_FIELD.RANKS)
else
  redis.call('ZADD', LEADER, now + tonumber(ARGV[FIRST_OWN_ARG + 1]), 'split|' .. JOB_ID)
end
return {OK}
