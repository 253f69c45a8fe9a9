--[[ restore: unpack a packed finished job back into its tasks hash and history (what `retry`
  and `dlq requeue` need), in bounded calls; readers keep reading the packed record until
  the last call removes it, in the same step, and counts the swap in `swaps`.
  KEYS: the job context (_job.lua)
  ARGV[A] items restored before this call (the caller's cursor)  ARGV[A+1] 1 on the last call
  ARGV[A+2] number of task field/value pairs, then the pairs, then history entries (in order)
  Returns {0} | {1} not packed: nothing to restore | {-4} job gone | {-6} another restore
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  moved the cursor meanwhile ]]

local P = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if redis.call('HEXISTS', J, JF.PACKED) == 0 then return {ALREADY} end
local before = tonumber(ARGV[A])
if tonumber(redis.call('HGET', J, JF.RESTORE_CURSOR) or 0) ~= before then return {CURSOR_MOVED} end

local last, npairs = ARGV[A + 1] == '1', tonumber(ARGV[A + 2])
local first_pair, first_entry = A + 3, A + 3 + 2 * npairs
if npairs > 0 then
  call_chunked_argv('HSET', T, first_pair, first_entry - 1)
  tasks_as_hashtable(META.n)
end
if first_entry <= #ARGV then call_chunked_argv('RPUSH', H, first_entry, #ARGV) end
local ttl = redis.call('PTTL', J)
if ttl > 0 then
  redis.call('PEXPIRE', T, ttl)
  redis.call('PEXPIRE', H, ttl)
end
if last then
  redis.call('DEL', P)
  redis.call('HDEL', J, JF.PACKED, JF.RESTORE_CURSOR)
  redis.call('HINCRBY', J, JF.SWAPS, 1) -- a reader of the record sees it was swapped out
  OBS.emit(EV.RESTORED, false)
else
  redis.call('HSET', J, JF.RESTORE_CURSOR, before + npairs + (#ARGV - first_entry + 1))
end
return {OK}
