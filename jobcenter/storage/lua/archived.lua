--[[ archived: the archive has committed a finished job (storage/archive/writer.py): its keys
  now start their hot retention, the job leaves the archive-pending zset and enters the
  expiring one, as finalize_job does without an archive. Only when the job is still as the
  archiver read it: finished, packed, the same `updated_at` (a retry since changes it, and
  its next end archives it again).
  KEYS: the job context (_job.lua)  KEYS[FIRST_OWN_KEY] its notifications hash
  KEYS[FIRST_OWN_KEY+1] its deliveries list
  ARGV[FIRST_OWN_ARG] the job's updated_at as read  ARGV[FIRST_OWN_ARG+1] the hot retention ms
  A job finalized by a process without the archive (it got the Redis retention) is confirmed
  the same way.
  Returns {0} | {1} not finished (retried since), or no archive configured
          | {-4} job gone | {-5} idempotency key not passed | {-6} the job changed since it was read: read it again
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not SLOT.archive then return {ALREADY} end
if not load_job() then
  if META.refusal == JOB_GONE then redis.call('ZREM', SLOT.archive, JOB_ID) end
  return {META.refusal}
end
if not queues_passed() then return {KEYS_MISSING} end
local finished = META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED
if not finished then
  redis.call('ZREM', SLOT.archive, JOB_ID) -- retried: its next end archives it again
  return {ALREADY}
end
local j = redis.call('HMGET', JOB, JOB_FIELD.UPDATED_AT, JOB_FIELD.RETENTION)
if j[1] ~= ARGV[FIRST_OWN_ARG] or not META.packed then return {CURSOR_MOVED} end

-- the hot retention, or the job's own retention when shorter
local ttl = tonumber(ARGV[FIRST_OWN_ARG + 1])
if j[2] and tonumber(j[2]) < ttl then ttl = tonumber(j[2]) end
for _, key in ipairs({JOB, TASKS, HISTORY, FRONTIER, PACKED, KEYS[FIRST_OWN_KEY],
    KEYS[FIRST_OWN_KEY + 1]}) do
  redis.call('PEXPIRE', key, ttl)
end
if IDEM ~= JOB then redis.call('PEXPIRE', IDEM, ttl) end
redis.call('ZADD', EXPIRING, now_ms() + ttl, expiring_member())
redis.call('ZREM', SLOT.archive, JOB_ID)
return {OK}
