--[[ restore: unpack a packed finished job back into its tasks hash and history (what `retry`
  and `dlq requeue` need), in bounded calls; readers keep reading the packed record until
  the last call removes it, in the same step, and counts the swap in `swaps`.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] items restored before this call (the caller's cursor)  ARGV[FIRST_OWN_ARG+1] 1
  on the last call
  ARGV[FIRST_OWN_ARG+2] number of task field/value pairs, then the pairs, then history entries (in
  order)
  Returns {0} | {1} not packed: nothing to restore | {-4} job gone | {-6} another restore
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  moved the cursor meanwhile ]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if redis.call('HEXISTS', JOB, JOB_FIELD.PACKED) == 0 then return {ALREADY} end
local before = tonumber(ARGV[FIRST_OWN_ARG])
if tonumber(redis.call('HGET', JOB,
  JOB_FIELD.RESTORE_CURSOR) or 0) ~= before then return {CURSOR_MOVED} end

local last, npairs = ARGV[FIRST_OWN_ARG + 1] == '1', tonumber(ARGV[FIRST_OWN_ARG + 2])
local first_pair, first_entry = FIRST_OWN_ARG + 3, FIRST_OWN_ARG + 3 + 2 * npairs
if npairs > 0 then
  call_chunked_argv('HSET', TASKS, first_pair, first_entry - 1)
  tasks_as_hashtable(META.n)
end
if first_entry <= #ARGV then call_chunked_argv('RPUSH', HISTORY, first_entry, #ARGV) end
local ttl = redis.call('PTTL', JOB)
if ttl > 0 then
  redis.call('PEXPIRE', TASKS, ttl)
  redis.call('PEXPIRE', HISTORY, ttl)
end
if last then
  redis.call('DEL', PACKED)
  redis.call('HDEL', JOB, JOB_FIELD.PACKED, JOB_FIELD.RESTORE_CURSOR)
  redis.call('HINCRBY', JOB, JOB_FIELD.SWAPS, 1) -- a reader of the record sees it was swapped out
  OBS.emit(EVENT_KIND.RESTORED, false)
else
  redis.call('HSET', JOB, JOB_FIELD.RESTORE_CURSOR, before + npairs + (#ARGV - first_entry + 1))
end
return {OK}
