--[[ publish_tasks: the leader writes one chunk of a pending job's tasks (split step 1).
  Chunks are numbered by a cursor, so a leader that took over after a crash goes on where
  the last one stopped, and two leaders never write the same chunk twice.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] leader step timeout ms
  ARGV[FIRST_OWN_ARG+2] tasks written before this chunk  ARGV[FIRST_OWN_ARG+3] tasks written after
  it  ARGV[FIRST_OWN_ARG+4..] field, value pairs (tasks hash)
  Returns {0} | {-3} job not pending | {-4} job gone | {-6} another leader moved the cursor 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]


if not load_job() then return {META.refusal} end
if META.state ~= J_PENDING or redis.call('HGET', JOB, JOB_FIELD.STOP) then return {WRONG_STATE} end
if tonumber(redis.call('HGET', JOB,
  JOB_FIELD.WRITTEN) or 0) ~= tonumber(ARGV[FIRST_OWN_ARG + 2]) then return {CURSOR_MOVED} end

local now = now_ms()
call_chunked_argv('HSET', TASKS, FIRST_OWN_ARG + 4, #ARGV)
stamp_created(tonumber(ARGV[FIRST_OWN_ARG + 2]), tonumber(ARGV[FIRST_OWN_ARG + 3]) - 1, now)
redis.call('HSET', JOB, JOB_FIELD.WRITTEN, ARGV[FIRST_OWN_ARG + 3], JOB_FIELD.LEADER,
  ARGV[FIRST_OWN_ARG], JOB_FIELD.UPDATED_AT, now)
redis.call('ZADD', LEADER, now + tonumber(ARGV[FIRST_OWN_ARG + 1]), 'split|' .. JOB_ID)
return {OK}
