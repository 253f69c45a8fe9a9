--[[ compact: swap a finished job's packed record in for its tasks hash and history. A
  leader reads them, packs them (jobcenter/storage/keyspace/packed.py) and writes the record here in
  parts; the call with the last part deletes the hash and the list in the same step, so a
  reader sees the one or the other, and counts the swap in `swaps`. Every call first checks
  that the job is still as the leader read it: finished, no cascade under way, not packed,
  the same `updated_at` (a retry changes it), and the parts written so far the ones this
  leader wrote.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] the job's updated_at as read  ARGV[FIRST_OWN_ARG+1] bytes of the record
  written before this call (0: the first part, which starts the record over)  ARGV[FIRST_OWN_ARG+2]
  1 on the last call
  ARGV[FIRST_OWN_ARG+3] the part  ARGV[FIRST_OWN_ARG+4] the record's format (schema.PACKED_FORMAT)
  Returns {0} | {1} nothing to do: not finished, a cascade under way, or packed already (its
  message is dropped) | {-4} job gone | {-6} the job changed since it was read, or another
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  leader wrote parts meanwhile: read it again ]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

local message = 'compact|' .. JOB_ID
if not load_job() then
  if META.refusal == JOB_GONE then redis.call('ZREM', LEADER, message) end
  return {META.refusal}
end
local finished = META.state == J_SUCCEEDED or META.state == J_FAILED or META.state == J_CANCELLED
if not finished or META.packed or redis.call('EXISTS', FRONTIER) == 1 then
  redis.call('ZREM', LEADER, message) -- the frontier's last 'continue' posts it again
  return {ALREADY}
end
local read_at, before, last, part = ARGV[FIRST_OWN_ARG], tonumber(ARGV[FIRST_OWN_ARG + 1]),
  ARGV[FIRST_OWN_ARG + 2] == '1', ARGV[FIRST_OWN_ARG + 3]
local format = ARGV[FIRST_OWN_ARG + 4]
local j = redis.call('HMGET', JOB, JOB_FIELD.UPDATED_AT, JOB_FIELD.COMPACT_CURSOR)
-- a first part starts the record over (a leader that died half way left a stale one)
if j[1] ~= read_at or (before > 0 and tonumber(j[2] or 0) ~= before) then
  return {CURSOR_MOVED}
end

if before == 0 then redis.call('SET', PACKED, part) else redis.call('APPEND', PACKED, part) end
local ttl = redis.call('PTTL', JOB)
if ttl > 0 then redis.call('PEXPIRE', PACKED, ttl) end
if last then
  redis.call('DEL', TASKS, HISTORY)
  redis.call('HDEL', JOB, JOB_FIELD.COMPACT_CURSOR)
  redis.call('HSET', JOB, JOB_FIELD.PACKED, format)
  redis.call('HINCRBY', JOB, JOB_FIELD.SWAPS, 1) -- a reader of the hash sees it was swapped out
  redis.call('ZREM', LEADER, message)
  OBS.emit(EVENT_KIND.COMPACTED, false)
else
  redis.call('HSET', JOB, JOB_FIELD.COMPACT_CURSOR, before + #part)
end
return {OK}
